"""A Squadron cluster for the client tests: two worker processes and a
coordinator serving TPC-H sample data, all on loopback ephemeral ports."""

import os
import pathlib
import socket
import subprocess
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
BIN_DIR = pathlib.Path(os.environ.get("SQUADRON_BIN_DIR", TARGET / "debug"))
SCALE = "0.01"


class Process:
    """A child process whose first stdout line ends with its URL."""

    def __init__(self, args, stderr=None, env=None):
        """`stderr`: a path to write the process's log to (else dropped);
        `env`: extra environment variables."""
        log = open(stderr, "w") if stderr else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, **(env or {})},
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{args[0]} exited with {self.proc.wait()}")
        self.url = line.strip().rsplit(" ", 1)[-1]

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def insecure_workers(count=2, *args, env=None):
    """`count` plaintext worker processes on loopback, with `args`."""
    return [
        Process([str(BIN_DIR / "squadron-worker"), "--listen", "127.0.0.1:0", "--insecure", *args],
                env=env)
        for _ in range(count)
    ]


def rows(uri, sql):
    """The answer of `sql` as a list of dicts, over a connection of its own."""
    import adbc_driver_flightsql.dbapi as flightsql

    with flightsql.connect(uri) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table().to_pylist()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("data")
    workers = insecure_workers()
    server = Process(
        [
            str(BIN_DIR / "squadron-server"),
            "--listen", "127.0.0.1:0",
            "--workers", ",".join(w.url for w in workers),
            "--demo", "--demo-scale", SCALE,
            "--data-dir", str(data_dir),
            # Every table at this scale is small enough to be read on the
            # coordinator; these tests are about the cluster (the JDBC
            # suite runs with the default).
            "--coordinator-scan-limit", "0",
        ]
    )
    yield {
        "uri": server.url,
        "data": data_dir / f"tpch-sf{SCALE}",
        "server": server,
    }
    server.stop()
    for w in workers:
        w.stop()


def free_port():
    """A loopback port free now (for listeners that cannot report theirs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    """The samples a Prometheus /metrics endpoint serves: {series: value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            samples[series] = float(value)
    return samples


def oracle_over(data_dir):
    """Single-node DataFusion over the Parquet files in `data_dir`."""
    import datafusion

    ctx = datafusion.SessionContext()
    for f in sorted(data_dir.glob("*.parquet")):
        ctx.register_parquet(f.stem, str(f))
    return ctx


@pytest.fixture(scope="session")
def oracle(cluster):
    """Single-node DataFusion over the files the cluster serves."""
    return oracle_over(cluster["data"])


def tpch_query(n):
    return (REPO / "testdata" / "tpch" / f"q{n}.sql").read_text()


def fetch(conn, sql):
    """The whole answer of `sql` on an ADBC connection."""
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


def expect_error(conn, sql, code):
    """Runs `sql`, which must fail with the gRPC `code` as ADBC prints it
    (e.g. "(NotFound;"); returns the message."""
    import adbc_driver_flightsql.dbapi as flightsql

    with conn.cursor() as cur:
        with pytest.raises(flightsql.Error) as err:
            cur.execute(sql)
            cur.fetchall()
    assert code in str(err.value), str(err.value)
    return str(err.value)
