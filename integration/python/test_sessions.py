"""Client sessions: SET/SHOW, the session catalog and schema, settings that
reach the workers, incremental execution (PollFlightInfo) and cancel. Each ADBC
connection is its own session."""

import adbc_driver_flightsql.dbapi as flightsql
import pytest

from answers import assert_same


def connect(cluster):
    return flightsql.connect(cluster["uri"])


def show(conn, key):
    with conn.cursor() as cur:
        cur.execute(f"SHOW {key}")
        return cur.fetchall()[0][1]


def test_set_changes_only_this_connection(cluster):
    with connect(cluster) as mine, connect(cluster) as other:
        with mine.cursor() as cur:
            cur.execute("SET datafusion.execution.batch_size = 100")
        assert show(mine, "datafusion.execution.batch_size") == "100"
        assert show(other, "datafusion.execution.batch_size") == "8192"
        with mine.cursor() as cur:
            cur.execute("RESET datafusion.execution.batch_size")
        assert show(mine, "datafusion.execution.batch_size") == "8192"


def test_session_settings_reach_the_workers(cluster, oracle):
    sql = "SELECT l_orderkey, l_linenumber FROM lineitem"
    with connect(cluster) as mine, connect(cluster) as other:
        with mine.cursor() as cur:
            cur.execute("SET datafusion.execution.batch_size = 100")
        sizes = {}
        for name, conn in [("mine", mine), ("other", other)]:
            with conn.cursor() as cur:
                cur.execute(sql)
                batches = list(cur.fetch_record_batch())
            sizes[name] = max(b.num_rows for b in batches)
            assert sum(b.num_rows for b in batches) == oracle.sql(sql).count()
        # Batches are cut on the workers, by the session's batch size.
        assert sizes["mine"] <= 100 < sizes["other"], sizes


def distributed_plan(conn, sql):
    with conn.cursor() as cur:
        cur.execute(f"EXPLAIN {sql}")
        return dict(cur.fetchall())["distributed_plan"]


def test_squadron_settings_change_planning_for_this_session_only(cluster, oracle):
    # The cluster runs every table read on the workers
    # (--coordinator-scan-limit 0); one session lets small reads run here.
    small = "SELECT count(*) FROM nation WHERE n_regionkey = 1"
    join = "SELECT n_name, count(*) FROM nation, region WHERE n_regionkey = r_regionkey GROUP BY 1"
    with connect(cluster) as mine, connect(cluster) as other:
        with mine.cursor() as cur:
            cur.execute("SET squadron.coordinator_scan_limit = 67108864")
        assert show(mine, "squadron.coordinator_scan_limit") == "67108864"
        assert show(other, "squadron.coordinator_scan_limit") == "0"
        assert "Runs on the coordinator" in distributed_plan(mine, small)
        assert "Runs on the coordinator" not in distributed_plan(other, small)
        # A join runs on the workers whatever the limit: its tasks carry the
        # session's squadron.* settings, which the workers accept.
        assert "Runs on the coordinator" not in distributed_plan(mine, join)
        for conn in (mine, other):
            with conn.cursor() as cur:
                cur.execute(small)
                assert cur.fetchall() == [(5,)]
                cur.execute(join)
                assert_same(cur.fetch_arrow_table(), oracle.sql(join).to_arrow_table(), False)
        with mine.cursor() as cur:
            cur.execute("RESET squadron.coordinator_scan_limit")
        assert show(mine, "squadron.coordinator_scan_limit") == "0"
        with pytest.raises(Exception, match="no_such_setting"):
            with mine.cursor() as cur:
                cur.execute("SET squadron.no_such_setting = 1")


def test_the_subset_key_row_limit_is_a_session_setting(cluster, oracle):
    # A count(DISTINCT) by group hashes on (group, value), then on group:
    # the planner folds the second shuffle into the first (one stage less)
    # when the rows below are few, which a session may forbid.
    sql = ("SELECT l_returnflag, count(DISTINCT l_suppkey) AS c FROM lineitem "
           "GROUP BY l_returnflag ORDER BY 1")
    with connect(cluster) as folding, connect(cluster) as not_folding:
        with not_folding.cursor() as cur:
            cur.execute("SET squadron.subset_key_max_rows = 0")
        folded = distributed_plan(folding, sql).count("Stage ")
        kept = distributed_plan(not_folding, sql).count("Stage ")
        assert kept == folded + 1, (folded, kept)
        for conn in (folding, not_folding):
            with conn.cursor() as cur:
                cur.execute(sql)
                assert_same(cur.fetch_arrow_table(), oracle.sql(sql).to_arrow_table(), True)


def test_a_session_may_raise_its_tasks_per_stage_within_bounds(cluster, oracle):
    # Each branch of the union shuffles its groups to the final aggregate
    # (after a one-partition input with no union above, one task would
    # finish the query, whatever the setting).
    sql = (
        "SELECT n_regionkey AS k, count(*) AS c FROM nation GROUP BY n_regionkey "
        "UNION ALL SELECT s_nationkey AS k, count(*) AS c FROM supplier GROUP BY s_nationkey "
        "ORDER BY k, c"
    )
    with connect(cluster) as conn, conn.cursor() as cur:
        cur.execute("SET datafusion.execution.target_partitions = 5")
        cur.execute(f"EXPLAIN {sql}")
        stages = cur.fetch_arrow_table().column("plan").to_pylist()[-1]
        assert "tasks=5" in stages, stages
        cur.execute(sql)
        assert_same(cur.fetch_arrow_table(), oracle.sql(sql).to_arrow_table(), ordered=True)
        cur.execute("SET datafusion.execution.planning_concurrency = 3")
        cur.execute("SET datafusion.execution.target_partitions = 0")  # the server's own
        assert show(conn, "datafusion.execution.target_partitions") != "0"


def test_drop_function_changes_only_this_connection(cluster):
    with connect(cluster) as mine, connect(cluster) as other:
        with mine.cursor() as cur:
            with pytest.raises(flightsql.Error, match="Function factory has not been configured"):
                cur.execute("CREATE FUNCTION twice (DOUBLE) RETURNS DOUBLE RETURN $1 * 2")
            cur.execute("DROP FUNCTION abs")
            with pytest.raises(flightsql.Error, match="Invalid function 'abs'"):
                cur.execute("SELECT abs(-1)")
            with pytest.raises(flightsql.Error, match="Function does not exist"):
                cur.execute("DROP FUNCTION abs")
            cur.execute("DROP FUNCTION IF EXISTS abs")
        with other.cursor() as cur:
            cur.execute("SELECT abs(n_nationkey - 30) AS a FROM nation WHERE n_nationkey = 0")
            assert cur.fetchall() == [(30,)]


def test_server_settings_are_refused(cluster):
    with connect(cluster) as conn, conn.cursor() as cur:
        for statement in [
            "SET datafusion.runtime.memory_limit = '1G'",
            "SET datafusion.execution.target_partitions = 1000",
        ]:
            with pytest.raises(flightsql.Error) as err:
                cur.execute(statement)
            assert "server setting" in str(err.value), str(err.value)
        with pytest.raises(flightsql.Error) as err:
            cur.execute("SET datafusion.execution.no_such_thing = 1")
        # DataFusion's own words, which scripts written for it match on.
        assert 'Config value "no_such_thing" not found on ExecutionOptions' in str(err.value)
        assert "INVALID_ARGUMENT" in str(err.value), str(err.value)
        cur.execute("SELECT 1 AS one")
        assert cur.fetchall() == [(1,)]


def test_functions_follow_the_session_time_zone(cluster):
    sql = "SELECT arrow_typeof(to_timestamp('2020-09-08T13:42:29Z')) AS t"
    with connect(cluster) as conn, conn.cursor() as cur:
        cur.execute(sql)
        assert cur.fetchall() == [("Timestamp(ns)",)]
        cur.execute("SET datafusion.execution.time_zone = 'America/New_York'")
        cur.execute(sql)
        assert cur.fetchall() == [('Timestamp(ns, "America/New_York")',)]
        cur.execute("RESET datafusion.execution.time_zone")
        cur.execute(sql)
        assert cur.fetchall() == [("Timestamp(ns)",)]


def test_catalog_and_schema_switch_per_connection(cluster):
    with connect(cluster) as mine, connect(cluster) as other:
        assert mine.adbc_current_catalog == "datafusion"
        assert mine.adbc_current_db_schema == "public"
        mine.adbc_current_db_schema = "information_schema"
        assert mine.adbc_current_db_schema == "information_schema"
        with mine.cursor() as cur:
            cur.execute("SELECT count(*) FROM df_settings WHERE name = 'datafusion.execution.batch_size'")
            assert cur.fetchall() == [(1,)]
            # What SQL editors ask on connect follows the session's defaults.
            cur.execute("SELECT current_catalog, current_database(), current_schema()")
            assert cur.fetchall() == [("datafusion", "datafusion", "information_schema")]
        with other.cursor() as cur:
            with pytest.raises(flightsql.Error) as err:
                cur.execute("SELECT count(*) FROM df_settings")
            assert "NOT_FOUND" in str(err.value), str(err.value)
            cur.execute("SELECT count(*) FROM nation")
            assert cur.fetchall() == [(25,)]
        with pytest.raises(flightsql.Error):
            mine.adbc_current_db_schema = "no_such_schema"
        with pytest.raises(flightsql.Error):
            mine.adbc_current_catalog = "no_such_catalog"
        assert mine.adbc_current_db_schema == "information_schema"
        mine.adbc_current_db_schema = "public"
        with mine.cursor() as cur:
            cur.execute("SELECT count(*) FROM nation")
            assert cur.fetchall() == [(25,)]
            # Over a table read on the workers too.
            cur.execute("SELECT current_schema(), count(*) FROM nation")
            assert cur.fetchall() == [("public", 25)]


def test_incremental_execution_polls_then_reads(cluster, oracle):
    sql = (
        "SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS q "
        "FROM lineitem GROUP BY l_returnflag, l_linestatus ORDER BY 1, 2"
    )
    with connect(cluster) as conn, conn.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.statement.exec.incremental": "true"})
        partitions, schema = cur.adbc_execute_partitions(sql)
        assert schema.names == ["l_returnflag", "l_linestatus", "n", "q"]
        all_partitions = list(partitions)
        # Poll until the driver reports no more partitions.
        for _ in range(1000):
            partitions, _ = cur.adbc_execute_partitions(sql)
            if not partitions:
                break
            all_partitions += partitions
        assert len(all_partitions) == 1
        with conn.cursor() as reader:
            reader.adbc_read_partition(all_partitions[0])
            got = reader.fetch_arrow_table()
    assert_same(got, oracle.sql(sql).to_arrow_table(), ordered=True)


def test_execute_schema_of_a_statement(cluster):
    with connect(cluster) as conn, conn.cursor() as cur:
        schema = cur.adbc_execute_schema("SELECT n_name, n_nationkey * 2 AS k FROM nation")
        assert schema.names == ["n_name", "k"]


def test_adbc_cancel_stops_a_long_query(cluster):
    import threading
    import time

    sql = "SELECT count(*) FROM generate_series(1, 100000000000) WHERE value % 7 = 3"
    with connect(cluster) as conn, conn.cursor() as cur:
        timer = threading.Timer(1.0, cur.adbc_cancel)
        timer.start()
        started = time.monotonic()
        with pytest.raises(flightsql.Error) as err:
            cur.execute(sql)
            cur.fetchall()
        timer.join()
        assert time.monotonic() - started < 30
        assert "cancel" in str(err.value).lower(), str(err.value)
    with connect(cluster) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM region")
        assert cur.fetchall() == [(5,)]


def test_view_types_never_reach_clients_whatever_the_session_plans(cluster):
    # Clients built on Arrow before string views (and the JDBC driver) read
    # Utf8 and Binary: a session that plans strings as views still gets them.
    sql = (
        "SELECT CAST(n_name AS VARCHAR) AS name, arrow_cast(n_name, 'Utf8View') AS viewed, "
        "arrow_cast(arrow_cast(n_name, 'Binary'), 'BinaryView') AS bytes "
        "FROM nation WHERE n_nationkey = 7"
    )
    with connect(cluster) as conn, conn.cursor() as cur:
        cur.execute("SET datafusion.sql_parser.map_string_types_to_utf8view = true")
        cur.execute(sql)
        table = cur.fetch_arrow_table()
        cur.execute("SELECT arrow_typeof(arrow_cast(n_name, 'Utf8View')) FROM nation LIMIT 1")
        assert cur.fetchall() == [("Utf8View",)]
    assert [str(t) for t in table.schema.types] == ["string", "string", "binary"]
    assert table.to_pylist() == [{"name": "GERMANY", "viewed": "GERMANY", "bytes": b"GERMANY"}]
