"""DDL, DML and bulk ingest through ADBC: row counts, every ingest mode,
created tables joined with the Parquet tables (checked against single-node
DataFusion), no half tables after a failed ingest, and tables that survive
a restart."""

import uuid

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pytest

from answers import assert_same
from conftest import BIN_DIR, Process


@pytest.fixture(scope="module")
def conn(cluster):
    with flightsql.connect(cluster["uri"]) as conn:
        yield conn


def fresh(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def count(cur, table):
    cur.execute(f"SELECT count(*) AS n FROM {table}")
    return cur.fetch_arrow_table().column("n").to_pylist()[0]


def execute_update(cur, sql):
    # On a statement of its own: the DB-API cursor skips setting its SQL
    # again when `execute` is given the text it ran last, so an update set
    # on the cursor's own statement would be run again by its next query.
    with cur.connection.cursor() as own:
        own.adbc_statement.set_sql_query(sql)
        return own.adbc_statement.execute_update()


def test_ddl_and_dml_report_row_counts(conn, oracle):
    t = fresh("asia")
    with conn.cursor() as cur:
        created = execute_update(
            cur,
            f"CREATE TABLE {t} AS SELECT n_nationkey, n_name FROM nation "
            "JOIN region ON n_regionkey = r_regionkey WHERE r_name = 'ASIA'",
        )
        expected = oracle.sql(
            "SELECT count(*) FROM nation JOIN region ON n_regionkey = r_regionkey "
            "WHERE r_name = 'ASIA'"
        ).to_arrow_table().column(0).to_pylist()[0]
        assert created == expected
        assert execute_update(cur, f"INSERT INTO {t} VALUES (100, 'ATLANTIS'), (101, 'MU')") == 2
        assert execute_update(cur, f"INSERT INTO {t} SELECT n_nationkey + 1000, n_name FROM {t}") == expected + 2
        assert count(cur, t) == 2 * (expected + 2)
        v = fresh("v")
        assert execute_update(cur, f"CREATE VIEW {v} AS SELECT n_name FROM {t} WHERE n_nationkey >= 100") == 0
        assert count(cur, v) == expected + 4
        execute_update(cur, f"DROP VIEW {v}")
        execute_update(cur, f"DROP TABLE {t}")
        with pytest.raises(flightsql.Error) as err:
            count(cur, t)
        assert "NOT_FOUND" in str(err.value)
        # IF EXISTS / IF NOT EXISTS are no-ops, not errors.
        assert execute_update(cur, f"DROP TABLE IF EXISTS {t}") == 0


def test_update_and_delete_change_created_tables_as_single_node_does(conn, oracle):
    t = fresh("orders_dml")
    source = (
        # nullable columns (the TPC-H ones are NOT NULL)
        "SELECT o_orderkey, nullif(o_custkey, -1) AS o_custkey, "
        "nullif(o_orderstatus, '') AS o_orderstatus, nullif(o_totalprice, -1) AS o_totalprice, "
        "nullif(o_comment, '') AS o_comment FROM orders WHERE o_orderkey < 3000"
    )
    statements = [
        # NULLs written; rows where a later predicate is NULL stay as they are
        # (TPC-H has no orders of customers whose key is a multiple of 3)
        f"UPDATE {t} SET o_totalprice = o_totalprice * 2, o_comment = NULL WHERE o_custkey % 3 = 1",
        f"UPDATE {t} SET o_orderstatus = 'X' WHERE o_comment LIKE '%ly%' OR o_totalprice > 300000",
        f"DELETE FROM {t} WHERE o_orderstatus = 'X' AND o_custkey % 2 = 0",
        f"DELETE FROM {t} WHERE o_comment = 'no such comment'",
        f"UPDATE {t} SET o_custkey = o_custkey + 1",
        f"DELETE FROM {t}",
    ]
    with conn.cursor() as cur:
        execute_update(cur, f"CREATE TABLE {t} AS {source}")
        oracle.sql(f"CREATE TABLE {t} AS {source}").collect()
        for sql in statements:
            expected = oracle.sql(sql).to_arrow_table().column(0).to_pylist()[0]
            assert execute_update(cur, sql) == expected, sql
            cur.execute(f"SELECT * FROM {t}")
            assert_same(
                cur.fetch_arrow_table(),
                oracle.sql(f"SELECT * FROM {t}").to_arrow_table(),
                ordered=False,
            )
        with pytest.raises(flightsql.Error, match="No field named nope"):
            execute_update(cur, f"UPDATE {t} SET nope = 1")
        with pytest.raises(flightsql.Error, match="not a table created through Squadron"):
            execute_update(cur, "DELETE FROM nation WHERE n_nationkey = 1")
        with pytest.raises(flightsql.Error, match="NOT_IMPLEMENTED.*no LIMIT"):
            execute_update(cur, f"DELETE FROM {t} WHERE o_custkey > 1 LIMIT 1")
        execute_update(cur, f"CREATE TABLE {t}_nn (k INT NOT NULL) AS VALUES (1)")
        with pytest.raises(flightsql.Error, match="non-nullable"):
            execute_update(cur, f"UPDATE {t}_nn SET k = NULL")
        assert execute_update(cur, f"UPDATE {t}_nn SET k = k + 1") == 1
        # The cursor prepared its query and runs that statement again when
        # the text repeats: each run reads the table as it is then.
        cur.execute(f"SELECT k FROM {t}_nn")
        assert cur.fetchall() == [(2,)]
        execute_update(cur, f"DROP TABLE {t}_nn")
        # The statement keeps the table it was prepared with, as single-node
        # DataFusion's keeps a dropped table's rows: its files stay readable
        # for --file-retention after the DROP.
        cur.execute(f"SELECT k FROM {t}_nn")
        assert cur.fetchall() == [(2,)]
        execute_update(cur, f"CREATE TABLE {t}_nn AS VALUES ('other', 'columns')")
        with pytest.raises(flightsql.Error, match="prepare it again"):
            cur.execute(f"SELECT k FROM {t}_nn")
        assert count(cur, f"{t}_nn") == 1
        execute_update(cur, f"DROP TABLE {t}")
        execute_update(cur, f"DROP TABLE {t}_nn")


@pytest.mark.parametrize("fmt", ["PARQUET", "CSV", "JSON"])
def test_insert_into_external_tables_writes_their_format_and_partitions(conn, oracle, tmp_path, fmt):
    t = fresh("ext")
    where = tmp_path / t
    with conn.cursor() as cur:
        execute_update(
            cur,
            f"CREATE EXTERNAL TABLE {t} (k BIGINT, name VARCHAR, region BIGINT) "
            f"STORED AS {fmt} PARTITIONED BY (region) LOCATION '{where}/'",
        )
        written = execute_update(cur, f"INSERT INTO {t} SELECT n_nationkey, n_name, n_regionkey FROM nation")
        assert written == 25
        assert execute_update(cur, f"INSERT INTO {t} VALUES (100, 'ATLANTIS', 9)") == 1
        cur.execute(f"SELECT * FROM {t}")
        assert_same(
            cur.fetch_arrow_table(),
            oracle.sql(
                "SELECT n_nationkey AS k, n_name AS name, n_regionkey AS region FROM nation "
                "UNION ALL SELECT 100, 'ATLANTIS', 9"
            ).to_arrow_table(),
            ordered=False,
        )
        # Written by the table's own sink: one directory per partition value.
        assert sorted(p.name for p in where.iterdir()) == [f"region={r}" for r in (0, 1, 2, 3, 4, 9)]
        with pytest.raises(flightsql.Error, match="INSERT INTO works on those.*FailedPrecondition"):
            execute_update(cur, "INSERT INTO nation SELECT * FROM nation")
        execute_update(cur, f"DROP TABLE {t}")


def test_a_copy_into_an_external_tables_directory_is_seen_by_its_next_query(conn, oracle, tmp_path):
    t = fresh("dir")
    where = tmp_path / t
    nations = "SELECT n_nationkey AS k, n_name AS name FROM nation"
    with conn.cursor() as cur:
        execute_update(cur, f"COPY ({nations} WHERE n_nationkey < 10) TO '{where}/0.parquet' STORED AS PARQUET")
        execute_update(cur, f"CREATE EXTERNAL TABLE {t} STORED AS PARQUET LOCATION '{where}/'")
        assert count(cur, t) == 10  # the directory's listing is now cached
        execute_update(cur, f"COPY ({nations} WHERE n_nationkey >= 10) TO '{where}/1.parquet' STORED AS PARQUET")
        cur.execute(f"SELECT * FROM {t}")
        assert_same(cur.fetch_arrow_table(), oracle.sql(nations).to_arrow_table(), ordered=False)
        execute_update(cur, f"DROP TABLE {t}")


def test_copy_writes_dictionaries_and_views_as_they_were_computed(conn, oracle, tmp_path):
    # The rows reach the coordinator with dictionaries decoded; the file
    # must still hold what the schema says (a dictionary written with
    # plain values read back as garbage).
    where = tmp_path / "dict.arrow"
    rows = (
        "SELECT column1 AS k, arrow_cast(column2, 'Dictionary(Int32, Utf8)') AS d, "
        "arrow_cast(column2, 'Utf8View') AS v FROM (VALUES ('c', 'foo'), ('d', 'bar'), ('e', NULL))"
    )
    t = fresh("copied")
    query = f"SELECT k, d, v, arrow_typeof(d) AS dt, arrow_typeof(v) AS vt FROM {t} ORDER BY k"
    with conn.cursor() as cur:
        assert execute_update(cur, f"COPY ({rows}) TO '{where}' STORED AS ARROW") == 3
        execute_update(cur, f"CREATE EXTERNAL TABLE {t} STORED AS ARROW LOCATION '{where}'")
        cur.execute(query)
        actual = cur.fetch_arrow_table()
        execute_update(cur, f"DROP TABLE {t}")
    oracle.sql(f"CREATE EXTERNAL TABLE {t} STORED AS ARROW LOCATION '{where}'").collect()
    expected = oracle.sql(query).to_arrow_table()
    oracle.sql(f"DROP TABLE {t}").collect()
    assert_same(actual, expected, ordered=True)
    assert actual.column("d").to_pylist() == ["foo", "bar", None]
    assert actual.column("dt").to_pylist()[0] == "Dictionary(Int32, Utf8)"


def test_created_float_columns_keep_nan_beside_one_other_value(conn, oracle):
    # Parquet's min/max leave NaN out: min == max made the reader answer
    # the one other value for every row.
    t = fresh("nan")
    create = (
        f"CREATE TABLE {t} (x DOUBLE, y DOUBLE) AS VALUES "
        "(arrow_cast('NAN', 'Float64'), 2.0), (3.0, '+Inf'::DOUBLE), (3.0, arrow_cast('NAN', 'Float64'))"
    )
    # max(y) is answered from the file's statistics unless they are taken
    # as bounds on the coordinator too (it answered Infinity, not NaN).
    queries = [f"SELECT x, y, greatest(x, y) AS g FROM {t}", f"SELECT max(x), min(x), max(y) FROM {t}"]
    with conn.cursor() as cur:
        execute_update(cur, create)
        actual = []
        for query in queries:
            cur.execute(query)
            actual.append(cur.fetch_arrow_table())
        execute_update(cur, f"DROP TABLE {t}")
    oracle.sql(create).collect()
    expected = [oracle.sql(query).to_arrow_table() for query in queries]
    oracle.sql(f"DROP TABLE {t}").collect()
    # NaN != NaN: compare the text of each row.
    text = lambda table: sorted(str(row) for row in zip(*(c.to_pylist() for c in table.columns)))
    for a, e in zip(actual, expected):
        assert text(a) == text(e)
        assert "nan" in str(text(a))


def test_created_tables_keep_the_types_they_were_created_with(conn, oracle):
    # As single-node DataFusion's tables do: VARCHAR is a string view, a
    # dictionary stays one, also after INSERT and UPDATE rewrite the files.
    # Clients still receive plain strings.
    t = fresh("typed")
    statements = [
        f"CREATE TABLE {t}_src (id INT, name VARCHAR) AS VALUES (1, 'a'), (2, NULL)",
        f"CREATE TABLE {t} AS SELECT id, name, arrow_cast(name, 'Dictionary(Int32, Utf8)') AS tag, "
        f"named_struct('r', name) AS s FROM {t}_src",
        f"INSERT INTO {t} VALUES (3, 'c', 'y', named_struct('r', 'c'))",
        f"UPDATE {t} SET name = 'z' WHERE id = 1",
        f"DROP TABLE {t}_src",
    ]
    query = (
        f"SELECT id, name, tag, s['r'] AS r, arrow_typeof(name) AS name_type, "
        f"arrow_typeof(tag) AS tag_type, arrow_typeof(s) AS s_type FROM {t} ORDER BY id"
    )
    with conn.cursor() as cur:
        for sql in statements:
            execute_update(cur, sql)
            oracle.sql(sql).collect()
        cur.execute(query)
        actual = cur.fetch_arrow_table()
        execute_update(cur, f"DROP TABLE {t}")
    expected = oracle.sql(query).to_arrow_table()
    oracle.sql(f"DROP TABLE {t}").collect()
    assert_same(actual, expected, ordered=True)
    assert actual.column("name_type").to_pylist()[0] == "Utf8View"
    assert actual.column("tag_type").to_pylist()[0] == "Dictionary(Int32, Utf8)"
    assert actual.schema.field("name").type == pa.string()
    assert actual.schema.field("tag").type == pa.string()


def test_a_column_with_one_value_in_its_file_is_still_the_column(conn, oracle):
    # Parquet statistics say min == max (or all NULL): DataFusion's reader
    # put a literal in the column's place, whose field is not the column's.
    t = fresh("one")
    create = f"CREATE TABLE {t} (x INT NOT NULL, y VARCHAR) AS VALUES (1, NULL)"
    query = f"SELECT arrow_field(x)['name'] AS xn, arrow_field(y)['name'] AS yn, x, y FROM {t}"
    with conn.cursor() as cur:
        execute_update(cur, create)
        cur.execute(query)
        actual = cur.fetch_arrow_table()
        execute_update(cur, f"DROP TABLE {t}")
    oracle.sql(create).collect()
    expected = oracle.sql(query).to_arrow_table()
    oracle.sql(f"DROP TABLE {t}").collect()
    assert_same(actual, expected, ordered=True)
    assert actual.column("xn").to_pylist() == ["x"]


def test_a_table_with_two_columns_of_one_name_is_refused(conn):
    t = fresh("dup")
    with conn.cursor() as cur:
        for sql in [
            f"CREATE TABLE {t} AS SELECT * FROM nation a JOIN nation b ON a.n_nationkey = b.n_nationkey",
            f"SELECT * INTO {t} FROM region a CROSS JOIN region b",
        ]:
            with pytest.raises(flightsql.Error, match="INVALID_ARGUMENT.*duplicate unqualified field name"):
                execute_update(cur, sql)
        with pytest.raises(flightsql.Error, match="not found"):
            count(cur, t)


def test_merge_into_answers_as_datafusion_does(conn):
    t = fresh("target")
    with conn.cursor() as cur:
        execute_update(cur, f"CREATE TABLE {t} (id INT, val VARCHAR) AS VALUES (1, 'a')")
        with pytest.raises(flightsql.Error, match="MERGE ON condition must be boolean"):
            execute_update(cur, f"MERGE INTO {t} USING nation ON 1 WHEN MATCHED THEN DELETE")
        with pytest.raises(flightsql.Error, match="MERGE INTO not supported for Base table"):
            execute_update(
                cur, f"MERGE INTO {t} USING nation ON {t}.id = n_nationkey WHEN MATCHED THEN DELETE"
            )
        assert count(cur, t) == 1
        execute_update(cur, f"DROP TABLE {t}")


def test_ddl_through_execute_takes_effect_without_a_fetch(conn):
    # ADBC's cursor.execute only describes the statement (GetFlightInfo);
    # it reads the answer (DoGet) only when fetched. DDL and DML must not
    # wait for that read, and their errors come back from execute itself.
    t = fresh("unfetched")
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {t} AS SELECT 1 AS a")
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {t} VALUES (2)")
    with conn.cursor() as cur:
        assert count(cur, t) == 2
        with pytest.raises(flightsql.Error) as err:
            cur.execute(f"DROP VIEW {t}")
        assert "doesn't exist" in str(err.value)
        cur.execute(f"DROP TABLE {t}")
        assert cur.fetch_arrow_table().num_rows == 0
    with conn.cursor() as cur, pytest.raises(flightsql.Error):
        cur.execute(f"SELECT * FROM {t}")


def test_executemany_inserts_every_row(conn):
    t = fresh("many")
    with conn.cursor() as cur:
        execute_update(cur, f"CREATE TABLE {t} (k BIGINT, s VARCHAR)")
        cur.executemany(f"INSERT INTO {t} VALUES (?, ?)", [(1, "a"), (2, "b"), (3, "c")])
        cur.execute(f"SELECT k, s FROM {t} ORDER BY k")
        assert cur.fetch_arrow_table().to_pylist() == [
            {"k": 1, "s": "a"},
            {"k": 2, "s": "b"},
            {"k": 3, "s": "c"},
        ]


def test_ingest_append_of_columns_the_table_cannot_hold_is_refused(conn):
    # Rows that do not fit the table's columns used to be acknowledged and
    # stored as NULLs.
    t = fresh("fit")
    with conn.cursor() as cur:
        execute_update(cur, f"CREATE TABLE {t} (z DOUBLE)")
        for rows, named in [
            (pa.table({"q": ["x"]}), '"q"'),
            (pa.table({"z": ["not a number"]}), '"z"'),
        ]:
            with pytest.raises(flightsql.Error) as err:
                cur.adbc_ingest(t, rows, mode="append")
            assert "INVALID_ARGUMENT" in str(err.value) and named in str(err.value), err.value
        assert count(cur, t) == 0
        # Columns match by name and convert: a string that is a number is one.
        assert cur.adbc_ingest(t, pa.table({"z": ["2.5"]}), mode="append") == 1
        cur.execute(f"SELECT z FROM {t}")
        assert cur.fetch_arrow_table().column("z").to_pylist() == [2.5]


def test_ingest_in_every_mode_then_join_with_parquet(conn, oracle):
    t = fresh("ing")
    rows = pa.table({"nationkey": pa.array([1, 2, 3], pa.int64()), "note": ["x", "y", "z"]})
    more = pa.table({"nationkey": pa.array([4], pa.int64()), "note": ["w"]})
    with conn.cursor() as cur:
        assert cur.adbc_ingest(t, rows, mode="create") == 3
        with pytest.raises(flightsql.Error) as err:
            cur.adbc_ingest(t, rows, mode="create")
        assert "ALREADY_EXISTS" in str(err.value)
        assert cur.adbc_ingest(t, more, mode="append") == 1
        assert count(cur, t) == 4
        assert cur.adbc_ingest(t, rows, mode="replace") == 3
        assert count(cur, t) == 3
        assert cur.adbc_ingest(t, more, mode="create_append") == 1
        assert count(cur, t) == 4
        with pytest.raises(flightsql.Error) as err:
            cur.adbc_ingest(fresh("missing"), rows, mode="append")
        assert "NOT_FOUND" in str(err.value)

        sql = f"SELECT n_name, note FROM {t} JOIN nation ON nationkey = n_nationkey"
        cur.execute(sql)
        actual = cur.fetch_arrow_table()
    oracle.register_record_batches(t, [pa.concat_tables([rows, more]).to_batches()])
    try:
        expected = oracle.sql(sql).to_arrow_table()
    finally:
        oracle.deregister_table(t)
    assert_same(actual, expected, ordered=False)


def test_a_failed_ingest_leaves_no_table(conn):
    t = fresh("broken")
    schema = pa.schema([("k", pa.int64())])

    def batches():
        yield pa.record_batch([pa.array([1, 2], pa.int64())], schema=schema)
        raise RuntimeError("the client fails mid-stream")

    with conn.cursor() as cur:
        with pytest.raises(Exception):
            cur.adbc_ingest(t, pa.RecordBatchReader.from_batches(schema, batches()), mode="create")
        with pytest.raises(flightsql.Error) as err:
            count(cur, t)
        assert "NOT_FOUND" in str(err.value)


def test_a_declared_key_lets_grouped_queries_select_what_depends_on_it(conn):
    table = fresh("keyed")
    with conn.cursor() as cur:
        execute_update(cur, f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR) AS VALUES (1, 'a'), (2, 'b')")
        cur.execute(f"SELECT id, v, count(*) FROM {table} GROUP BY id ORDER BY id")
        assert cur.fetchall() == [(1, "a", 1), (2, "b", 1)]
        # Without a key the same query is refused, as in DataFusion.
        execute_update(cur, f"CREATE TABLE {table}_plain (id INT, v VARCHAR) AS VALUES (1, 'a')")
        with pytest.raises(flightsql.Error, match="must appear in the GROUP BY"):
            cur.execute(f"SELECT id, v FROM {table}_plain GROUP BY id")


def test_created_tables_and_views_survive_a_restart(tmp_path):
    def start():
        return Process([
            str(BIN_DIR / "squadron-server"),
            "--listen", "127.0.0.1:0",
            "--local-workers", "1",
            "--data-dir", str(tmp_path),
            "--insecure",
        ], stderr=tmp_path / "server.log")

    server = start()
    try:
        with flightsql.connect(server.url) as conn, conn.cursor() as cur:
            with conn.cursor() as ingest:
                ingest.adbc_ingest("kept", pa.table({"k": pa.array([1, 2, 3], pa.int64())}), mode="create")
            execute_update(cur, "CREATE VIEW kept_big AS SELECT k FROM kept WHERE k > 1")
            execute_update(
                cur, "CREATE TABLE keyed (id INT PRIMARY KEY, v VARCHAR) AS VALUES (1, 'a'), (2, 'b')"
            )
            # Rewritten tables keep their new rows, their key and their
            # column defaults.
            assert execute_update(cur, "UPDATE keyed SET v = 'z' WHERE id = 2") == 1
            execute_update(
                cur,
                "CREATE TABLE defaulted (a INT, d VARCHAR DEFAULT lower('X'), n INT DEFAULT 1 + 2)",
            )
            assert execute_update(cur, "INSERT INTO defaulted (a) VALUES (1)") == 1
            assert execute_update(cur, "UPDATE defaulted SET n = 4") == 1
            assert execute_update(cur, "DELETE FROM kept WHERE k = 3") == 1
            # A type Parquet cannot hold (an interval with nanoseconds) is
            # kept (in Arrow IPC files), and so is a dictionary.
            execute_update(
                cur,
                "CREATE TABLE spans AS SELECT interval '1 month 2 days' AS i, "
                "arrow_cast('x', 'Dictionary(Int32, Utf8)') AS d",
            )
            assert execute_update(cur, "INSERT INTO spans VALUES (interval '3 hours', 'y')") == 1
            execute_update(cur, "CREATE TABLE gone AS SELECT 1 AS one")
            execute_update(cur, "DROP TABLE gone")
            # Quoted names stay one part with their case, now and after
            # the restart: "foo.bar" is not table bar of schema foo.
            execute_update(cur, 'CREATE TABLE "foo.bar" AS VALUES (1), (2)')
            execute_update(cur, 'CREATE TABLE "Mixed" AS VALUES (1), (2), (3)')
            execute_update(cur, 'INSERT INTO "Mixed" VALUES (4)')
            assert count(cur, '"foo.bar"') == 2
            assert count(cur, '"Mixed"') == 4
            with pytest.raises(flightsql.Error):
                count(cur, "mixed")
            # A schema, a table and a view in it; a schema that is dropped.
            execute_update(cur, 'CREATE SCHEMA "Sales"')
            execute_update(cur, 'CREATE TABLE "Sales".q AS VALUES (1), (2)')
            execute_update(cur, 'CREATE VIEW "Sales".q_view AS SELECT * FROM "Sales".q')
            execute_update(cur, "CREATE SCHEMA scratch")
            execute_update(cur, "DROP SCHEMA scratch")
            # A catalog of its own, a schema and a table in it.
            execute_update(cur, 'CREATE DATABASE "Shop"')
            execute_update(cur, 'CREATE SCHEMA "Shop".s')
            execute_update(cur, 'CREATE TABLE "Shop".s.t AS VALUES (1), (2)')
    finally:
        server.stop()
    server = start()
    try:
        with flightsql.connect(server.url) as conn, conn.cursor() as cur:
            cur.execute("SELECT arrow_typeof(i), arrow_typeof(d), CAST(i AS VARCHAR), d FROM spans ORDER BY d")
            assert cur.fetchall() == [
                ("Interval(MonthDayNano)", "Dictionary(Int32, Utf8)", "1 mons 2 days", "x"),
                ("Interval(MonthDayNano)", "Dictionary(Int32, Utf8)", "3 hours", "y"),
            ]
            assert count(cur, "kept") == 2
            assert execute_update(cur, "INSERT INTO defaulted (a) VALUES (2)") == 1
            cur.execute("SELECT a, d, n FROM defaulted ORDER BY a")
            assert cur.fetchall() == [(1, "x", 4), (2, "x", 3)]
            assert count(cur, "kept_big") == 1
            # The key is kept: v depends on it, so GROUP BY id may select v.
            cur.execute("SELECT id, v FROM keyed GROUP BY id ORDER BY id")
            assert cur.fetchall() == [(1, "a"), (2, "z")]
            with pytest.raises(flightsql.Error):
                count(cur, "gone")
            assert count(cur, '"foo.bar"') == 2
            assert count(cur, '"Mixed"') == 4
            assert count(cur, '"Shop".s.t') == 2
            assert count(cur, '"Sales".q') == 2
            assert count(cur, '"Sales".q_view') == 2
            with pytest.raises(flightsql.Error, match="CASCADE|depend"):
                execute_update(cur, 'DROP SCHEMA "Sales"')
            execute_update(cur, 'DROP SCHEMA "Sales" CASCADE')
            with pytest.raises(flightsql.Error):
                count(cur, '"Sales".q')
            with pytest.raises(flightsql.Error, match="PermissionDenied"):
                execute_update(cur, "DROP SCHEMA system CASCADE")
            execute_update(cur, "CREATE TABLE scratch AS VALUES (1)")
            execute_update(cur, "DROP TABLE scratch")
            execute_update(cur, 'DROP TABLE "foo.bar"')
            execute_update(cur, 'DROP TABLE "Mixed"')
            with pytest.raises(flightsql.Error):
                count(cur, '"Mixed"')
    finally:
        server.stop()


def test_concurrent_inserts_and_updates_on_one_host_lose_nothing(cluster):
    import host_agent
    from concurrent_writes import check_concurrent_writes

    class Here:
        """The client, in this process."""

        @staticmethod
        def call(**request):
            return host_agent.handle(request)

    def sql(*statements):
        answers = host_agent.run_sql(cluster["uri"], list(statements))
        for statement, answer in zip(statements, answers):
            assert "error" not in answer, (statement, answer)
        return [a["rows"] for a in answers]

    check_concurrent_writes(Here, cluster["uri"], sql)
    # Two rewriters: one of two UPDATEs of the same files is refused with
    # ABORTED (the check asserts that every refusal says so).
    outcome = check_concurrent_writes(Here, cluster["uri"], sql, table="conc2", updaters=2)
    assert outcome["update_errors"], "two rewriters never raced"
