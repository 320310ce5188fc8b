"""The dialect: PostgreSQL's SQL compilers (DataFusion's SQL is close to
PostgreSQL's), ADBC's Flight SQL DB-API as the driver, reflection from
`information_schema` and Flight SQL's primary keys, no transactions."""

import re

from sqlalchemy import text
from sqlalchemy.dialects.postgresql.base import (
    PGCompiler,
    PGDDLCompiler,
    PGIdentifierPreparer,
    PGTypeCompiler,
)
from sqlalchemy.engine import default, reflection

from .primary_keys import Endpoint, primary_key
from .types import column_type


class SquadronCompiler(PGCompiler):
    def limit_clause(self, select, **kw):
        # LIMIT and OFFSET as literals: a placeholder there has no type
        # DataFusion can plan with.
        kw = {**kw, "literal_binds": True}
        clause = ""
        if select._limit_clause is not None:
            clause += "\n LIMIT " + self.process(select._limit_clause, **kw)
        if select._offset_clause is not None:
            clause += " OFFSET " + self.process(select._offset_clause, **kw)
        return clause


class SquadronDialect(default.DefaultDialect):
    name = "squadron"
    driver = "adbc"
    supports_statement_cache = True
    paramstyle = "qmark"
    statement_compiler = SquadronCompiler
    ddl_compiler = PGDDLCompiler
    type_compiler_cls = PGTypeCompiler
    preparer = PGIdentifierPreparer
    default_schema_name = "public"
    supports_native_boolean = True
    supports_native_decimal = True
    supports_sequences = False
    supports_alter = False
    supports_comments = False
    supports_default_values = False
    supports_empty_insert = False
    supports_multivalues_insert = True
    postfetch_lastrowid = False
    implicit_returning = False
    insert_returning = False
    update_returning = False
    delete_returning = False
    requires_name_normalize = False
    # Read by PostgreSQL's compiler when it renders a string literal:
    # DataFusion's strings take no backslash escapes.
    _backslash_escapes = False

    def __init__(self, **kw):
        super().__init__(**kw)
        self._endpoint = None

    @classmethod
    def import_dbapi(cls):
        import adbc_driver_flightsql.dbapi

        return adbc_driver_flightsql.dbapi

    def create_connect_args(self, url):
        """`squadron://[user[:password]@]host[:port][?tls=true&tls_root_certs=PATH]`."""
        query = dict(url.query)
        tls = query.pop("tls", "false").lower() in ("1", "true", "yes")
        location = "{}://{}:{}".format(
            "grpc+tls" if tls else "grpc", url.host or "127.0.0.1", url.port or 50051
        )
        db_kwargs = {}
        roots = None
        if url.username is not None:
            db_kwargs["username"] = url.username
            db_kwargs["password"] = url.password or ""
        if "tls_root_certs" in query:
            with open(query.pop("tls_root_certs"), "rb") as pem:
                roots = pem.read()
            db_kwargs["adbc.flight.sql.client_option.tls_root_certs"] = roots.decode()
        if query:
            raise ValueError("unknown options in the URL: " + ", ".join(sorted(query)))
        self._endpoint = Endpoint(location, url.username, url.password, roots)
        return [location], {"db_kwargs": db_kwargs, "autocommit": True}

    # No transactions: every statement commits on its own.
    def do_begin(self, dbapi_connection):
        pass

    def do_commit(self, dbapi_connection):
        pass

    def do_rollback(self, dbapi_connection):
        pass

    def get_isolation_level(self, dbapi_connection):
        return "AUTOCOMMIT"

    def get_isolation_level_values(self, dbapi_connection):
        return ["AUTOCOMMIT"]

    def set_isolation_level(self, dbapi_connection, level):
        if level != "AUTOCOMMIT":
            raise NotImplementedError("Squadron has no transactions: only AUTOCOMMIT")

    def _get_server_version_info(self, connection):
        version = connection.exec_driver_sql("SELECT version()").scalar() or ""
        found = re.search(r"(\d+)\.(\d+)\.(\d+)", version)
        return tuple(int(part) for part in found.groups()) if found else None

    def _get_default_schema_name(self, connection):
        return connection.exec_driver_sql("SELECT current_schema()").scalar()

    def _schema(self, connection, schema):
        return schema or self.default_schema_name

    def _names(self, connection, sql, **params):
        return [row[0] for row in connection.execute(text(sql), params)]

    @reflection.cache
    def get_schema_names(self, connection, **kw):
        return self._names(
            connection,
            "SELECT schema_name FROM information_schema.schemata "
            "WHERE catalog_name = current_catalog ORDER BY schema_name",
        )

    def _tables_of_type(self, connection, schema, table_type):
        return self._names(
            connection,
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_catalog = current_catalog AND table_schema = :schema "
            "AND table_type = :type ORDER BY table_name",
            schema=self._schema(connection, schema),
            type=table_type,
        )

    @reflection.cache
    def get_table_names(self, connection, schema=None, **kw):
        return self._tables_of_type(connection, schema, "BASE TABLE")

    @reflection.cache
    def get_view_names(self, connection, schema=None, **kw):
        return self._tables_of_type(connection, schema, "VIEW")

    def has_table(self, connection, table_name, schema=None, **kw):
        return bool(
            self._names(
                connection,
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_catalog = current_catalog AND table_schema = :schema "
                "AND table_name = :name",
                schema=self._schema(connection, schema),
                name=table_name,
            )
        )

    @reflection.cache
    def get_view_definition(self, connection, view_name, schema=None, **kw):
        found = self._names(
            connection,
            "SELECT definition FROM information_schema.views "
            "WHERE table_catalog = current_catalog AND table_schema = :schema "
            "AND table_name = :name",
            schema=self._schema(connection, schema),
            name=view_name,
        )
        if not found:
            from sqlalchemy.exc import NoSuchTableError

            raise NoSuchTableError(view_name)
        return found[0]

    @reflection.cache
    def get_columns(self, connection, table_name, schema=None, **kw):
        rows = connection.execute(
            text(
                "SELECT column_name, data_type, is_nullable, column_default "
                "FROM information_schema.columns "
                "WHERE table_catalog = current_catalog AND table_schema = :schema "
                "AND table_name = :name ORDER BY ordinal_position"
            ),
            {"schema": self._schema(connection, schema), "name": table_name},
        ).all()
        if not rows:
            from sqlalchemy.exc import NoSuchTableError

            raise NoSuchTableError(table_name)
        return [
            {
                "name": name,
                "type": column_type(data_type),
                "nullable": is_nullable == "YES",
                "default": default_value,
                "autoincrement": False,
            }
            for name, data_type, is_nullable, default_value in rows
        ]

    @reflection.cache
    def get_pk_constraint(self, connection, table_name, schema=None, **kw):
        catalog = connection.exec_driver_sql("SELECT current_catalog").scalar()
        name, columns = primary_key(
            self._endpoint, catalog, self._schema(connection, schema), table_name
        )
        return {"constrained_columns": columns, "name": name}

    def get_foreign_keys(self, connection, table_name, schema=None, **kw):
        # DataFusion keeps no foreign keys.
        return []

    def get_indexes(self, connection, table_name, schema=None, **kw):
        return []

    def get_unique_constraints(self, connection, table_name, schema=None, **kw):
        return []

    def get_check_constraints(self, connection, table_name, schema=None, **kw):
        return []
