"""Squadron on hosts that share no disk (see hosts.py and multihost.py):
the coordinator, three workers, the client and an S3-compatible store each
on a network namespace of its own with private /tmp and data directories;
the TPC-H tables and the warehouse in the store. Checked against
single-node DataFusion over the local copies of the files.

Skipped, with the reason, where namespaces cannot be made (they need root,
which the CI machine has)."""

import time
from decimal import Decimal

import pytest

import hosts
import multihost
from concurrent_writes import check_concurrent_writes
from multihost import QueryError, wait_until

SCALE = "0.01"


@pytest.fixture(scope="module")
def network():
    reason = hosts.available()
    if reason:
        pytest.skip(reason)
    net = hosts.Network(keep=multihost.KEEP)
    yield net
    net.close()


@pytest.fixture(scope="module")
def tpch_dir(tmp_path_factory):
    return multihost.generate_tpch(tmp_path_factory.mktemp("tpch"), SCALE)


@pytest.fixture(scope="module")
def cluster(network, tpch_dir, tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    cluster = multihost.Cluster(
        network, logs, tpch_dir,
        # Files are deleted as soon as no version names them: the tests
        # count what is left.
        coordinator_args=["--sweep-grace", "0", "--sweep-interval", "1", "--file-retention", "0"])
    yield cluster
    cluster.close()


def oracle(tpch_dir):
    import datafusion

    ctx = datafusion.SessionContext()
    for f in sorted(tpch_dir.glob("*.parquet")):
        ctx.register_parquet(f.stem, str(f))
    return ctx


def value(ctx, sql):
    got = ctx.sql(sql).to_arrow_table().to_pylist()[0]
    return [str(v) if v is not None and not isinstance(v, (int, float, str)) else v
            for v in got.values()]


def test_tpch_from_the_object_store_equals_single_node(cluster, tpch_dir):
    failures = cluster.client.call(op="tpch", uri=cluster.uri, data_dir=str(tpch_dir),
                                   queries_dir=multihost.queries_dir())["failures"]
    assert failures == {}


def test_written_tables_are_read_by_every_worker(cluster, tpch_dir):
    before = {name: cluster.worker_tasks(name) for name in cluster.workers}
    cluster.sql(
        "CREATE TABLE li2 AS SELECT * FROM lineitem",
        "INSERT INTO li2 SELECT * FROM lineitem WHERE l_orderkey < 1000",
        "UPDATE li2 SET l_quantity = l_quantity + 1 WHERE l_suppkey % 7 = 0",
        "DELETE FROM li2 WHERE l_linenumber = 7",
        "COPY (SELECT * FROM orders WHERE o_orderkey % 2 = 0) "
        f"TO '{multihost.WAREHOUSE}copies/orders_even/' STORED AS PARQUET",
        f"CREATE EXTERNAL TABLE orders_even STORED AS PARQUET "
        f"LOCATION '{multihost.WAREHOUSE}copies/orders_even/'",
    )
    cluster.client.call(op="ingest", uri=cluster.uri, table="ingested", rows=50_000,
                        batch_rows=5_000, mode="create")
    local = oracle(tpch_dir)
    got = cluster.sql(
        "SELECT count(*), sum(l_quantity), sum(l_extendedprice) FROM li2",
        "SELECT count(*), sum(o_totalprice) FROM orders_even",
        "SELECT count(*), sum(k) FROM ingested",
    )
    updated = ("CASE WHEN l_suppkey % 7 = 0 THEN l_quantity + 1 ELSE l_quantity END")
    expected = [
        value(local, f"SELECT count(*), sum({updated}), sum(l_extendedprice) FROM ("
                     "SELECT * FROM lineitem UNION ALL "
                     "SELECT * FROM lineitem WHERE l_orderkey < 1000) WHERE l_linenumber <> 7"),
        value(local, "SELECT count(*), sum(o_totalprice) FROM orders WHERE o_orderkey % 2 = 0"),
        [50_000, sum(range(50_000))],
    ]
    assert [rows[0] for rows in got] == expected
    # Each worker wrote and read: no read needed the coordinator's disk.
    after = {name: cluster.worker_tasks(name) for name in cluster.workers}
    assert all(after[name] > before[name] for name in before), (before, after)


def test_a_coordinator_started_on_a_new_host_serves_the_same_tables(cluster):
    cluster.sql("CREATE TABLE moved AS SELECT n_nationkey, n_name FROM nation",
                "INSERT INTO moved VALUES (100, 'ATLANTIS')",
                "CREATE VIEW moved_view AS SELECT count(*) AS n FROM moved")
    expected = cluster.sql("SELECT count(*), sum(n_nationkey) FROM moved")[0]
    old_host = cluster.coordinator_host
    cluster.kill_coordinator()
    cluster.start_coordinator(new_host=True)
    assert cluster.coordinator_host is not old_host
    assert cluster.sql("SELECT count(*), sum(n_nationkey) FROM moved")[0] == expected
    assert cluster.one("SELECT n FROM moved_view") == 26


def test_an_unreadable_table_path_names_the_worker_and_the_path(cluster):
    # A file only the coordinator's host has.
    cluster.kill_coordinator()
    path = "/tmp/data/only-here.parquet"
    cluster.start_coordinator(extra=[f"--table=only_here={path}"],
                              copies=[(cluster.tpch_dir / "nation.parquet", path)])
    rows, error = cluster.try_sql("SELECT count(*) FROM only_here WHERE n_name LIKE '%A%'")
    assert rows is None
    assert "NOT_FOUND" in error and path in error, error
    assert any(url.split("//")[1] in error for url in cluster.worker_urls()), error
    cluster.kill_coordinator()
    cluster.start_coordinator()


def test_concurrent_inserts_and_updates_lose_nothing(cluster):
    check_concurrent_writes(cluster.client, cluster.uri, cluster.sql)





# Statements cut short: each runs on a table big enough to take seconds,
# and is cut (its coordinator or a worker SIGKILLed, or its client gone)
# while its tasks run, writing their part files (bulk ingest: while the
# client sends, the coordinator writing). Afterwards the table is wholly as
# before or wholly as after, the server answers, and the sweep leaves no
# file the catalog does not name.

COPIES = 30  # lineitem (60 K rows at 0.01) times this: 1.8 M rows


@pytest.fixture(scope="module")
def base(cluster):
    # generate_series first: the cross join collects its left side, and
    # the tasks split lineitem.
    cluster.sql(f"CREATE TABLE base AS SELECT l.*, g.value AS copy "
                f"FROM generate_series(1, {COPIES}) g CROSS JOIN lineitem l")
    return table_state(cluster, "base")


def table_state(cluster, table):
    """(rows, sum of l_quantity) of `table`, or None when it does not exist."""
    rows, error = cluster.try_sql(f"SELECT count(*), sum(l_quantity) FROM {table}")
    if rows is None:
        assert "NOT_FOUND" in error, error
        return None
    count, total = rows[0]
    return count, Decimal(total)


STATEMENTS = {
    "ctas": (None, "CREATE TABLE {t} AS SELECT * FROM base",
             lambda before, base: base),
    "insert": ("CREATE TABLE {t} AS SELECT * FROM base WHERE copy = 1",
               "INSERT INTO {t} SELECT * FROM base",
               lambda before, base: (before[0] + base[0], before[1] + base[1])),
    "update": ("CREATE TABLE {t} AS SELECT * FROM base",
               "UPDATE {t} SET l_quantity = l_quantity + 1",
               lambda before, base: (before[0], before[1] + before[0])),
}


def cut_while_running(cluster, fault, statement_client, on_workers=True):
    """Applies `fault` while the statement `statement_client` sent runs: a
    second after its tasks started (`on_workers`), or after it was sent;
    whether the statement had not ended by then."""
    deadline = time.time() + 120
    while on_workers and time.time() < deadline and not statement_client.answered():
        if cluster.running_tasks() > 0:
            break
        time.sleep(0.05)
    time.sleep(1)
    mid_write = not statement_client.answered()
    if fault == "coordinator":
        cluster.kill_coordinator()
    elif fault == "worker":
        cluster.kill_worker("w2")
    else:
        statement_client.kill()
    statement_client.finish()
    if fault == "coordinator":
        cluster.start_coordinator()
    elif fault == "worker":
        cluster.start_worker("w2")
    return mid_write


@pytest.mark.parametrize("statement", sorted(STATEMENTS))
@pytest.mark.parametrize("fault", ["coordinator", "worker", "client"])
def test_a_write_cut_short_is_all_or_nothing(cluster, base, statement, fault):
    table = f"cut_{statement}_{fault}"
    prepare, sql, expected = STATEMENTS[statement]
    if prepare:
        cluster.sql(prepare.format(t=table))
    before = table_state(cluster, table)
    after = expected(before, base)
    client = cluster.agent()
    client.send(op="sql", uri=cluster.uri, sql=[sql.format(t=table)])
    assert cut_while_running(cluster, fault, client), (
        f"{statement} ended before it could be cut; make it larger")
    state = wait_until("the server to answer", lambda: answering(cluster, table))[0]
    assert state in (before, after), (before, after, state)
    wait_until("the sweep to remove every unnamed file", lambda: not cluster.orphan_files())


@pytest.mark.parametrize("fault", ["coordinator", "client"])
def test_an_ingest_cut_short_is_all_or_nothing(cluster, fault):
    table = f"cut_ingest_{fault}"
    cluster.client.call(op="ingest", uri=cluster.uri, table=table, rows=1000,
                        batch_rows=1000, mode="create")
    client = cluster.agent()
    client.send(op="ingest", uri=cluster.uri, table=table, rows=3_000_000,
                batch_rows=20_000, mode="append")
    assert cut_while_running(cluster, fault, client, on_workers=False), (
        "the ingest ended before it could be cut; make it larger")
    rows = wait_until("the server to answer",
                      lambda: answering_sql(cluster, f"SELECT count(*) FROM {table}"))[0]
    assert rows in ([[1000]], [[3_001_000]]), rows
    wait_until("the sweep to remove every unnamed file", lambda: not cluster.orphan_files())


def answering_sql(cluster, sql):
    try:
        return [cluster.sql(sql)[0]]
    except Exception:  # noqa: BLE001 - not up yet
        return None


def answering(cluster, table):
    try:
        return [table_state(cluster, table)]
    except Exception:  # noqa: BLE001 - not up yet
        return None


# Commits that fail: the statement fails, the server shows the state from
# before it, and so does a restart.

def test_a_commit_on_a_full_disk_changes_nothing(network, tmp_path):
    host = network.host("disk")
    # The warehouse's catalog on a disk of its own, small enough to fill;
    # the disks outlive the coordinator, as a host's do.
    disks = host.disks([("/tmp/wh", "64m"), ("/tmp/wh/catalog", "256k")])
    client = Client(network)

    def start():
        proc = host.start(
            [str(multihost.BIN_DIR / "squadron-server"), "--listen",
             f"{host.address}:{multihost.COORDINATOR_PORT}", "--local-workers", "2",
             "--insecure", "--warehouse", "/tmp/wh", "--data-dir", "/tmp/wh/data"],
            disks=disks, log=tmp_path / "disk-coordinator.log")
        return proc, hosts.banner_url(proc)

    proc, uri = start()
    sql = client.sql(uri)
    sql("CREATE TABLE kept AS SELECT value AS k, value * 10 AS v FROM generate_series(1, 1000)",
        "CREATE TABLE doomed AS VALUES (1)")
    before = sql("SELECT count(*), sum(v) FROM kept")[0][0]
    host.run_in_mounts(disks, "sh", "-c", "dd if=/dev/zero of=/tmp/wh/catalog/filler bs=1k || true")
    for statement in ["UPDATE kept SET v = v + 1", "DELETE FROM kept WHERE k < 10",
                      "INSERT INTO kept VALUES (5000, 1)", "DROP TABLE doomed"]:
        rows, error = client.try_sql(uri, statement)
        assert rows is None, statement
        assert "(ResourceExhausted;" in error and "No space left" in error, error
    assert sql("SELECT count(*), sum(v) FROM kept")[0][0] == before
    assert sql("SELECT * FROM doomed")[0] == [[1]]
    proc.kill()
    proc.wait()
    proc, uri = start()
    sql = client.sql(uri)
    assert sql("SELECT count(*), sum(v) FROM kept")[0][0] == before
    assert sql("SELECT * FROM doomed")[0] == [[1]]
    # Room again: commits go through.
    host.run_in_mounts(disks, "rm", "/tmp/wh/catalog/filler")
    sql("UPDATE kept SET v = v + 1", "DROP TABLE doomed")
    assert sql("SELECT count(*), sum(v) FROM kept")[0][0] == [before[0], before[1] + before[0]]
    client.close()


def test_a_commit_with_the_store_gone_changes_nothing(cluster):
    # The coordinator reaches the store by an address of its own, which
    # goes away between the statement's writes (by the workers) and its
    # commit; the workers keep theirs.
    own = cluster.s3_host.add_address()
    cluster.kill_coordinator()
    cluster.start_coordinator(store_endpoint=f"http://{own}:{multihost.MOTO_PORT}")
    cluster.sql("CREATE TABLE unstored AS SELECT * FROM nation")
    before = cluster.sql("SELECT count(*), sum(n_regionkey) FROM unstored")[0]
    cluster.s3_host.remove_address(own)
    for statement in ["UPDATE unstored SET n_regionkey = n_regionkey + 1",
                      "DROP TABLE unstored"]:
        rows, error = cluster.try_sql(statement)
        assert rows is None, statement
        assert "(Unavailable;" in error and "committing" in error, error
    assert cluster.sql("SELECT count(*), sum(n_regionkey) FROM unstored")[0] == before
    cluster.s3_host.add_address(own)
    cluster.kill_coordinator()
    cluster.start_coordinator()
    assert cluster.sql("SELECT count(*), sum(n_regionkey) FROM unstored")[0] == before


# A worker cut off the network (its link down: the process and its sockets
# stay) in the middle of a query.

def test_a_worker_cut_off_mid_query_is_routed_around(cluster, base, tpch_dir):
    local = oracle(tpch_dir)
    sql = ("SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS q "
           "FROM base GROUP BY 1, 2 ORDER BY 1, 2")
    expected = [[r["l_returnflag"], r["l_linestatus"], r["n"] * COPIES, str(r["q"] * COPIES)]
                for r in local.sql(
                    "SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS q "
                    "FROM lineitem GROUP BY 1, 2 ORDER BY 1, 2").to_arrow_table().to_pylist()]
    host, _ = cluster.workers["w3"]
    client = cluster.agent()
    client.send(op="sql", uri=cluster.uri, sql=[sql])
    wait_until("tasks to run", lambda: cluster.running_tasks() > 0, interval=0.05)
    host.link(up=False)
    try:
        answer = wait_until("the query to end", client.answered, timeout=90, interval=0.2)
        assert answer
        rows = client.receive()["answers"][0]
        assert rows == {"rows": expected}, rows
    finally:
        host.link(up=True)
        client.close()
    # Back on the network, the worker takes tasks again.
    before = cluster.worker_tasks("w3")
    wait_until("w3 to take tasks again", lambda: (
        cluster.sql("SELECT count(*) FROM base WHERE copy < 3") and
        cluster.worker_tasks("w3") > before), timeout=60, interval=1)


class Client:
    """An agent on a client host of its own, for clusters other than the
    module's."""

    def __init__(self, network):
        self.host = network.host(f"cl{len(network.hosts)}")
        proc = self.host.start([multihost.sys.executable, str(multihost.AGENT)],
                               env=multihost.CREDENTIALS, private_tmp=False, stdin=True)
        assert proc.stdout.readline().startswith("agent ready")
        self.agent = multihost.AgentProcess(proc)

    def try_sql(self, uri, sql):
        answer = self.agent.call(op="sql", uri=uri, sql=[sql])["answers"][0]
        return answer.get("rows"), answer.get("error")

    def sql(self, uri):
        def run(*statements):
            answers = self.agent.call(op="sql", uri=uri, sql=list(statements))["answers"]
            for statement, answer in zip(statements, answers):
                if "error" in answer:
                    raise QueryError(f"{statement}: {answer['error']}")
            return [a["rows"] for a in answers]
        return run

    def close(self):
        self.agent.close()


def test_tpch_through_a_latency_proxy_equals_single_node(cluster, tpch_dir):
    if not multihost.TOXIPROXY.exists():
        pytest.skip(f"{multihost.TOXIPROXY} is not built (./test.sh builds it)")
    proxy = multihost.LatencyProxy(cluster)
    workers = [f"http://{proxy.through(f'{host.address}:{multihost.WORKER_PORT}')}"
               for host, _ in cluster.workers.values()]
    store = f"http://{proxy.through(f'{cluster.s3_host.address}:{multihost.MOTO_PORT}')}"
    cluster.kill_coordinator()
    cluster.start_coordinator(workers=workers, store_endpoint=store)
    direct = cluster.uri
    cluster.uri = "grpc://" + proxy.through(f"{cluster.coordinator_host.address}:"
                                            f"{multihost.COORDINATOR_PORT}")
    try:
        failures = cluster.client.call(op="tpch", uri=cluster.uri, data_dir=str(tpch_dir),
                                       queries_dir=multihost.queries_dir())["failures"]
        assert failures == {}
    finally:
        cluster.uri = direct
        cluster.kill_coordinator()
        cluster.start_coordinator()
