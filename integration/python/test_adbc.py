"""The ADBC Flight SQL driver against a distributed Squadron cluster."""

import adbc_driver_flightsql.dbapi as flightsql
import pytest

from answers import assert_same, is_ordered
from conftest import tpch_query


@pytest.fixture(scope="module")
def conn(cluster):
    with flightsql.connect(cluster["uri"]) as conn:
        yield conn


@pytest.mark.parametrize("n", range(1, 23))
def test_tpch_matches_single_node(conn, oracle, n):
    sql = tpch_query(n)
    with conn.cursor() as cur:
        cur.execute(sql)
        actual = cur.fetch_arrow_table()
    expected = oracle.sql(sql).to_arrow_table()
    assert actual.column_names == expected.column_names
    assert_same(actual, expected, is_ordered(sql))


@pytest.mark.parametrize(
    "sql",
    [
        # A join with a table in the recursive term.
        "WITH RECURSIVE chain AS ("
        " SELECT o_orderkey AS k, o_custkey AS c, 0 AS depth FROM orders WHERE o_orderkey < 200"
        " UNION ALL SELECT o.o_orderkey, o.o_custkey, chain.depth + 1 FROM orders o"
        " JOIN chain ON o.o_custkey = chain.c AND o.o_orderkey > chain.k WHERE chain.depth < 3)"
        " SELECT depth, count(*) AS n, sum(k) AS keys FROM chain GROUP BY depth ORDER BY depth",
        # The work table read for one of its columns (a projection pushed
        # into it, which its encoding must keep).
        "WITH RECURSIVE t(i, d) AS (SELECT 1, 0 UNION ALL"
        " SELECT n.n_regionkey, t.d + 1 FROM nation n, t WHERE t.d < 2 AND n.n_nationkey < 3)"
        " SELECT d, count(*) AS n, sum(i) AS s FROM t GROUP BY d ORDER BY d",
    ],
)
def test_recursive_queries_over_tables_match_single_node(conn, oracle, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        actual = cur.fetch_arrow_table()
    assert actual.num_rows > 1
    assert_same(actual, oracle.sql(sql).to_arrow_table(), ordered=True)


def test_result_schema_is_announced_before_rows(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT n_name, n_nationkey FROM nation WHERE n_nationkey < 0")
        table = cur.fetch_arrow_table()
    assert table.num_rows == 0
    assert table.column_names == ["n_name", "n_nationkey"]


def test_bad_sql_is_invalid_argument_and_server_stays_up(conn):
    with conn.cursor() as cur:
        with pytest.raises(flightsql.ProgrammingError) as err:
            cur.execute("SELEC nonsense")
        assert "INVALID_ARGUMENT" in str(err.value)
        cur.execute("SELECT count(*) AS n FROM region")
        assert cur.fetch_arrow_table().column("n").to_pylist() == [5]


def test_unknown_table_is_not_found(conn):
    with conn.cursor() as cur:
        with pytest.raises(flightsql.ProgrammingError) as err:
            cur.execute("SELECT * FROM no_such_table")
        assert "NOT_FOUND" in str(err.value)
        assert "no_such_table" in str(err.value)
        cur.execute("SELECT count(*) AS n FROM nation")
        assert cur.fetch_arrow_table().column("n").to_pylist() == [25]


def test_explain_shows_stages(conn):
    with conn.cursor() as cur:
        cur.execute("EXPLAIN " + tpch_query(3))
        plans = dict(zip(*[c.to_pylist() for c in cur.fetch_arrow_table().columns]))
    stages = plans["distributed_plan"]
    # customer's filtered keys broadcast to the stage that joins orders and
    # lineitem where they are read (split by key range, not shuffled).
    assert stages.count("Stage ") >= 2, stages
    assert "UnionExec" in stages, stages
    assert "StageReadExec" in stages
    assert not any(kind.startswith("distributed_plan after") for kind in plans)


def test_explain_verbose_lists_the_distributed_passes_in_order(conn):
    with conn.cursor() as cur:
        cur.execute("EXPLAIN VERBOSE " + tpch_query(3))
        kinds, shown = [c.to_pylist() for c in cur.fetch_arrow_table().columns]
    # DataFusion's own rows name each physical rule, Squadron's among them.
    assert "physical_plan after NoShuffleAfterOnePartition" in kinds, kinds
    passes = [k.removeprefix("distributed_plan after ") for k in kinds if k.startswith("distributed_plan after ")]
    assert passes == ["WithoutOutputMerge", "MergeSubsetKeyShuffles", "ReduceShuffles"], kinds
    # Then the stages, last.
    assert kinds[-1] == "distributed_plan"
    assert shown[-1].count("Stage ") >= 2, shown[-1]


def test_view_and_dictionary_columns_reach_clients_as_plain_strings(conn):
    import pyarrow as pa

    sql = (
        "SELECT arrow_cast(n_name, 'Utf8View') AS v, "
        "arrow_cast(n_name, 'Dictionary(Int32, Utf8)') AS d "
        "FROM nation WHERE n_regionkey = 1 ORDER BY n_name"
    )
    with conn.cursor() as cur:
        cur.execute(sql)
        table = cur.fetch_arrow_table()
    assert table.schema.field("v").type == pa.string()
    assert table.schema.field("d").type == pa.string()
    names = ["ARGENTINA", "BRAZIL", "CANADA", "PERU", "UNITED STATES"]
    assert table.column("v").to_pylist() == names
    assert table.column("d").to_pylist() == names


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT (SELECT n_name FROM nation WHERE n_regionkey = 1)",
        "SELECT r_name FROM region WHERE r_regionkey = (SELECT n_regionkey FROM nation)",
        "SELECT r_regionkey + (SELECT n_nationkey FROM nation WHERE n_nationkey < 2) FROM region",
    ],
)
def test_a_scalar_subquery_of_several_rows_is_an_error(conn, sql):
    with conn.cursor() as cur:
        with pytest.raises(flightsql.Error, match="Scalar subquery returned more than one row"):
            cur.execute(sql)
            cur.fetchall()


def test_a_scalar_subquery_of_one_row_or_none_is_its_value_or_null(conn):
    with conn.cursor() as cur:
        cur.execute(
            "SELECT r_name FROM region WHERE r_regionkey = "
            "(SELECT n_regionkey FROM nation WHERE n_name = 'JAPAN')"
        )
        assert cur.fetchall() == [("ASIA",)]
        cur.execute("SELECT (SELECT n_name FROM nation WHERE n_nationkey = -1) AS none")
        assert cur.fetchall() == [(None,)]
        cur.execute("SELECT count(*) FROM region WHERE r_regionkey > (SELECT min(n_regionkey) FROM nation)")
        assert cur.fetchall() == [(4,)]
