"""Workers discovered through DNS (`--workers-dns NAME:PORT`) join and leave
while the coordinator runs, as pods behind a Kubernetes headless Service do.

The name is answered by the system resolver (getaddrinfo), as in a real
deployment; the test controls the answer by running the coordinator in its
own mount namespace with a private /etc/hosts. Two workers listen on the
same port at different loopback addresses, as pods do.
"""

import subprocess
import time

import pytest

from conftest import BIN_DIR, SCALE, Process, free_port, rows, scrape, tpch_query

NAME = "squadron-workers.test"
SUCCEEDED = 'squadron_worker_tasks_total{outcome="succeeded"}'


def can_use_mount_namespaces():
    """Whether this machine lets the test do exactly what the fixture does:
    a private mount namespace with a file bind-mounted over /etc/hosts."""
    probe = ["unshare", "-m", "--propagation", "private", "sh", "-c",
             "mount --bind /etc/hosts /etc/hosts"]
    try:
        return subprocess.run(probe, capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


pytestmark = pytest.mark.skipif(
    not can_use_mount_namespaces(),
    reason="needs unshare -m (root or user namespaces) to give the coordinator its own /etc/hosts",
)


def wait_for_workers(uri, wanted):
    deadline = time.time() + 15
    while True:
        listed = sorted(w["url"] for w in rows(uri, "SELECT url FROM system.workers"))
        if listed == sorted(wanted):
            return
        assert time.time() < deadline, f"workers listed {listed}, expected {sorted(wanted)}"
        time.sleep(0.1)


def tasks_done(metrics_port):
    return scrape(metrics_port).get(SUCCEEDED, 0.0)


@pytest.fixture(scope="module")
def dns_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dns")
    port = free_port()
    addresses = ["127.0.0.2", "127.0.0.3"]
    metrics = [free_port(), free_port()]
    workers = [
        Process([str(BIN_DIR / "squadron-worker"), "--listen", f"{address}:{port}", "--insecure",
                 "--metrics-listen", f"127.0.0.1:{metrics_port}"])
        for address, metrics_port in zip(addresses, metrics)
    ]
    hosts = tmp / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{addresses[0]} {NAME}\n")
    server_args = [
        str(BIN_DIR / "squadron-server"), "--listen", "127.0.0.1:0",
        "--workers-dns", f"{NAME}:{port}", "--discovery-interval", "0.2",
        "--health-interval", "0.3",
        "--demo", "--demo-scale", SCALE, "--data-dir", str(tmp / "data"),
        # Every table at this scale could be read on the coordinator.
        "--coordinator-scan-limit", "0",
    ]
    # mount --bind keeps the file's inode: rewriting it in place changes what
    # the coordinator's resolver reads.
    server = Process([
        "unshare", "-m", "--propagation", "private", "sh", "-c",
        f'mount --bind "{hosts}" /etc/hosts && exec "$@"', "sh", *server_args,
    ])
    yield {
        "uri": server.url,
        "hosts": hosts,
        "urls": [f"http://{address}:{port}" for address in addresses],
        "metrics": metrics,
    }
    server.stop()
    for w in workers:
        w.stop()


def test_dns_workers_join_and_leave_mid_session(dns_cluster):
    uri, hosts = dns_cluster["uri"], dns_cluster["hosts"]
    first, second = dns_cluster["urls"]
    first_metrics, second_metrics = dns_cluster["metrics"]

    # One address: only that worker is known and gets tasks.
    wait_for_workers(uri, [first])
    before = tasks_done(second_metrics)
    expected = rows(uri, tpch_query(3))
    assert expected
    assert tasks_done(first_metrics) > 0
    assert tasks_done(second_metrics) == before

    # A second address appears: new queries use both, no restart.
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.2 {NAME}\n127.0.0.3 {NAME}\n")
    wait_for_workers(uri, [first, second])
    assert rows(uri, tpch_query(3)) == expected
    assert tasks_done(second_metrics) > before, "the worker that joined got no tasks"

    # The first address goes away: it gets no new tasks, answers stay right.
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.3 {NAME}\n")
    wait_for_workers(uri, [second])
    left_at = tasks_done(first_metrics)
    assert rows(uri, tpch_query(3)) == expected
    assert tasks_done(first_metrics) == left_at, "a worker no longer in DNS got tasks"

    # DNS answering nothing for the name keeps the last list (an outage must
    # not empty the cluster).
    hosts.write_text("127.0.0.1 localhost\n")
    time.sleep(1.0)
    wait_for_workers(uri, [second])
    assert rows(uri, tpch_query(3)) == expected
