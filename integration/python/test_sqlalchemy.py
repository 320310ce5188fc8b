"""SQLAlchemy 2 through the repo's dialect (integration/sqlalchemy,
`squadron://`): reflection of schemas, tables, views, columns and primary
keys, bound parameters, and pandas' read_sql, with answers checked against
single-node DataFusion over the same files (`oracle`)."""

import datetime

import pandas as pd
import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy import create_engine, inspect, select, text

from answers import assert_same

TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]


@pytest.fixture(scope="module")
def engine(cluster):
    address = cluster["uri"].split("://", 1)[1]
    engine = create_engine(f"squadron://{address}")
    yield engine
    engine.dispose()


def test_reflection_lists_schemas_tables_and_columns(engine, oracle):
    inspector = inspect(engine)
    assert {"public", "system"} <= set(inspector.get_schema_names())
    assert set(TABLES) <= set(inspector.get_table_names())
    assert {"queries", "tasks", "workers"} <= set(inspector.get_view_names(schema="system"))
    for table in TABLES:
        columns = inspector.get_columns(table)
        expected = oracle.table(table).schema()
        assert [c["name"] for c in columns] == expected.names
        for column, field in zip(columns, expected):
            if pa.types.is_decimal(field.type):
                assert isinstance(column["type"], sa.NUMERIC), column
                assert (column["type"].precision, column["type"].scale) == (
                    field.type.precision,
                    field.type.scale,
                )
            elif pa.types.is_int64(field.type):
                assert isinstance(column["type"], sa.BIGINT), column
            elif pa.types.is_date(field.type):
                assert isinstance(column["type"], sa.DATE), column
            elif pa.types.is_string(field.type) or pa.types.is_string_view(field.type):
                assert isinstance(column["type"], sa.VARCHAR), column
            assert column["nullable"] == field.nullable, column
    assert inspector.has_table("nation")
    assert not inspector.has_table("no_such_table")


def test_primary_keys_and_views_are_reflected(engine):
    with engine.connect() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE sa_keyed (id BIGINT NOT NULL, part INT NOT NULL, v VARCHAR, "
            "PRIMARY KEY (id, part))"
        )
        conn.exec_driver_sql("CREATE VIEW sa_asia AS SELECT n_name FROM nation WHERE n_regionkey = 2")
    try:
        inspector = inspect(engine)
        key = inspector.get_pk_constraint("sa_keyed")
        assert key["constrained_columns"] == ["id", "part"]
        assert inspector.get_pk_constraint("nation")["constrained_columns"] == []
        assert "sa_asia" in inspector.get_view_names()
        assert "n_regionkey = 2" in inspector.get_view_definition("sa_asia")
        keyed = sa.Table("sa_keyed", sa.MetaData(), autoload_with=engine)
        assert [c.name for c in keyed.primary_key.columns] == ["id", "part"]
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql("DROP VIEW sa_asia")
            conn.exec_driver_sql("DROP TABLE sa_keyed")


def test_core_queries_with_parameters_match_the_oracle(engine, oracle):
    nation = sa.Table("nation", sa.MetaData(), autoload_with=engine)
    query = (
        select(nation.c.n_name, nation.c.n_nationkey)
        .where(nation.c.n_regionkey == 3)
        .order_by(nation.c.n_name)
        .limit(3)
    )
    with engine.connect() as conn:
        got = conn.execute(query).all()
    expected = oracle.sql(
        "SELECT n_name, n_nationkey FROM nation WHERE n_regionkey = 3 ORDER BY n_name LIMIT 3"
    ).to_arrow_table()
    assert got == [tuple(row.values()) for row in expected.to_pylist()]


def test_pandas_read_sql_with_params_matches_the_oracle(engine, oracle):
    frame = pd.read_sql(
        text(
            "SELECT o_orderpriority, count(*) AS n FROM orders "
            "WHERE o_totalprice > :price GROUP BY o_orderpriority"
        ),
        engine,
        params={"price": 100000.0},
    )
    expected = oracle.sql(
        "SELECT o_orderpriority, count(*) AS n FROM orders "
        "WHERE o_totalprice > 100000.0 GROUP BY o_orderpriority"
    ).to_arrow_table()
    assert_same(pa.Table.from_pandas(frame, preserve_index=False), expected, ordered=False)


def _truncated(value, grain):
    """`value` truncated to Superset's `grain`, computed here."""
    if grain is None:
        return value
    if grain == "PT1S":
        return value.replace(microsecond=0)
    if grain == "PT1M":
        return value.replace(second=0, microsecond=0)
    if grain == "PT1H":
        return value.replace(minute=0, second=0, microsecond=0)
    day = value.replace(hour=0, minute=0, second=0, microsecond=0)
    if grain == "P1D":
        return day
    if grain == "P1W":
        return day - datetime.timedelta(days=day.weekday())
    if grain == "P1M":
        return day.replace(day=1)
    if grain == "P3M":
        return day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1)
    assert grain == "P1Y", grain
    return day.replace(month=1, day=1)


def test_superset_time_grains_truncate_as_their_names_say(engine):
    # The engine spec's expressions (Superset itself is not installed here).
    from squadron_sqlalchemy.time_grains import TIME_GRAIN_EXPRESSIONS

    column = (
        "CAST(o_orderdate AS TIMESTAMP) + INTERVAL '13 hours 7 minutes 5.25 seconds'"
    )
    with engine.connect() as conn:
        values = [
            row[0]
            for row in conn.exec_driver_sql(
                f"SELECT {column} FROM orders ORDER BY o_orderkey LIMIT 50"
            )
        ]
        for grain, expression in TIME_GRAIN_EXPRESSIONS.items():
            sql = f"SELECT {expression.format(col=column)} FROM orders ORDER BY o_orderkey LIMIT 50"
            got = [row[0] for row in conn.exec_driver_sql(sql)]
            assert got == [_truncated(v, grain) for v in values], grain
