"""A Squadron cluster spread over hosts that share no disk (hosts.py): an
S3-compatible store (moto's server) on a host of its own, a coordinator,
three workers and a client, each host with its own address and private
/tmp and data directories. The warehouse and the TPC-H tables are in the
store; the client (host_agent.py) is the only process the test talks to
the cluster through."""

import json
import os
import pathlib
import subprocess
import sys
import time

import hosts
from conftest import BIN_DIR, REPO

BUCKET = "squadron"
WAREHOUSE = f"s3://{BUCKET}/warehouse/"
TPCH = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]
AGENT = pathlib.Path(__file__).parent / "host_agent.py"
# What every host's processes must still see if it lies under /tmp (a CI
# checkout there): the repository, the binaries, the Python environment.
KEEP = [REPO, BIN_DIR, pathlib.Path(sys.prefix)]
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "multihost", "AWS_SECRET_ACCESS_KEY": "multihost",
               "AWS_REGION": "us-east-1"}
WORKER_PORT = 50061
COORDINATOR_PORT = 50051
METRICS_PORT = 9100
MOTO_PORT = 5000


def generate_tpch(directory, scale):
    """TPC-H Parquet files in `directory` (made by the server's --demo,
    which is stopped once they are written)."""
    server = subprocess.Popen(
        [str(BIN_DIR / "squadron-server"), "--demo", "--demo-scale", scale, "--data-dir",
         str(directory), "--local-workers", "1", "--listen", "127.0.0.1:0", "--insecure"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        hosts.banner_url(server)
    finally:
        server.kill()
        server.wait()
    return directory / f"tpch-sf{scale}"


class Cluster:
    """The hosts, and the processes on them."""

    def __init__(self, network, logs, tpch_dir, coordinator_args=(), worker_args=()):
        self.network = network
        self.logs = logs
        self.tpch_dir = tpch_dir
        self.coordinator_args = list(coordinator_args)
        self.worker_args = list(worker_args)
        self.s3_host = network.host("s3")
        self.moto = self.s3_host.start(
            # Every address of its host (it may be given a second one).
            [str(pathlib.Path(sys.executable).parent / "moto_server"), "-H", "0.0.0.0",
             "-p", str(MOTO_PORT)], log=logs / "moto.log", piped=False)
        self.endpoint = f"http://{self.s3_host.address}:{MOTO_PORT}"
        self.client_host = network.host("client")
        self.client = self.agent()
        self.wait_for_store()
        self.s3("create_bucket")
        self.s3("upload", dir=str(tpch_dir), prefix="tpch")
        self.workers = {}
        for n in range(1, 4):
            self.start_worker(f"w{n}")
        self.coordinator_host = None
        self.coordinator = None
        self.start_coordinator()

    def agent(self):
        host = self.client_host
        proc = host.start([sys.executable, str(AGENT)],
                          env=CREDENTIALS, log=self.logs / "agent.log", private_tmp=False,
                          stdin=True)
        line = proc.stdout.readline()
        assert line.startswith("agent ready"), line
        return AgentProcess(proc)

    def wait_for_store(self):
        deadline = time.time() + 30
        while True:
            try:
                self.client.call(op="http", url=f"{self.endpoint}/moto-api/")
                return
            except RuntimeError:
                assert time.time() < deadline, "the object store did not start"
                time.sleep(0.3)

    def s3(self, action, **request):
        return self.client.call(op="s3", action=action, endpoint=self.endpoint, bucket=BUCKET,
                                key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                                secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], **request)

    def store_options(self, endpoint=None):
        return f"s3://?endpoint={endpoint or self.endpoint}&allow_http=true"

    def start_worker(self, name):
        host = self.network.host(name) if name not in self.workers else self.workers[name][0]
        proc = host.start(
            [str(BIN_DIR / "squadron-worker"), "--listen", f"{host.address}:{WORKER_PORT}",
             "--insecure", "--store", self.store_options(), "--warehouse", WAREHOUSE,
             "--metrics-listen", f"{host.address}:{METRICS_PORT}", *self.worker_args],
            env=CREDENTIALS, private=["/tmp/data"], log=self.logs / f"{name}.log")
        hosts.banner_url(proc)
        self.workers[name] = (host, proc)
        return host

    def kill_worker(self, name):
        _, proc = self.workers[name]
        proc.kill()
        proc.wait()

    def worker_urls(self):
        return [f"http://{host.address}:{WORKER_PORT}" for host, _ in self.workers.values()]

    def start_coordinator(self, new_host=False, extra=(), store_endpoint=None, mounts=(),
                          copies=(), workers=None):
        """The coordinator, on its host (a new one with an empty disk when
        `new_host`), reaching the store at `store_endpoint` and the workers
        at `workers` when given."""
        if self.coordinator_host is None or new_host:
            self.coordinator_host = self.network.host(f"c{len(self.network.hosts)}")
        tables = [f"--table={t}=s3://{BUCKET}/tpch/{t}/" for t in TPCH]
        self.coordinator = self.coordinator_host.start(
            [str(BIN_DIR / "squadron-server"),
             "--listen", f"{self.coordinator_host.address}:{COORDINATOR_PORT}",
             "--workers", ",".join(workers or self.worker_urls()), "--insecure",
             "--store", self.store_options(store_endpoint), "--warehouse", WAREHOUSE,
             "--data-dir", "/tmp/data", "--coordinator-scan-limit", "0",
             "--health-interval", "0.5", *tables, *self.coordinator_args, *extra],
            env=CREDENTIALS, private=["/tmp/data"], mounts=mounts, copies=copies,
            log=self.logs / "coordinator.log")
        self.uri = hosts.banner_url(self.coordinator)
        return self.coordinator

    def kill_coordinator(self):
        self.coordinator.kill()
        self.coordinator.wait()

    def sql(self, *statements):
        """Each statement's answer: rows, or raises with the error."""
        answers = self.client.call(op="sql", uri=self.uri, sql=list(statements))["answers"]
        for sql, answer in zip(statements, answers):
            if "error" in answer:
                raise QueryError(f"{sql}: {answer['error']}")
        return [a["rows"] for a in answers]

    def one(self, sql):
        """The single value `sql` answers."""
        return self.sql(sql)[0][0][0]

    def try_sql(self, sql):
        """(rows, None) or (None, error text)."""
        answer = self.client.call(op="sql", uri=self.uri, sql=[sql])["answers"][0]
        return answer.get("rows"), answer.get("error")

    def worker_metric(self, name, metric):
        """The sum of `metric`'s series on worker `name`."""
        host, _ = self.workers[name]
        url = f"http://{host.address}:{METRICS_PORT}/metrics"
        text = self.client.call(op="http", url=url)["text"]
        total = 0.0
        for line in text.splitlines():
            if line.startswith(metric + " ") or line.startswith(metric + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def worker_tasks(self, name):
        """Tasks the worker `name` ran (all outcomes), by its metrics."""
        return self.worker_metric(name, "squadron_worker_tasks_total")

    def running_tasks(self):
        """Tasks running now on the workers that answer."""
        total = 0.0
        for name in self.workers:
            try:
                total += self.worker_metric(name, "squadron_worker_tasks_running")
            except RuntimeError:
                pass
        return total

    def latest_catalog(self):
        keys = self.s3("list", prefix="warehouse/catalog/")["keys"]
        newest = max(keys)
        return json.loads(self.s3("get", key_name=newest)["text"])

    def orphan_files(self):
        """Files under the warehouse's table area that the newest catalog
        version does not name."""
        named = set()
        for entry in self.latest_catalog()["entries"]:
            if entry["kind"] == "managed":
                for f in entry["files"]:
                    named.add(f"warehouse/{entry['location']}{f['name']}")
        keys = self.s3("list", prefix="warehouse/tables/")["keys"]
        return sorted(set(keys) - named)

    def close(self):
        self.client.close()


class AgentProcess:
    """A client agent process (host_agent.py) on the client host."""

    def __init__(self, proc):
        self.proc = proc

    def call(self, **request):
        self.send(**request)
        return self.receive()

    def send(self, **request):
        """Sends a request without waiting for its answer."""
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def answered(self):
        """Whether the answer to the last request sent is there to read (or
        the agent is gone)."""
        import select
        ready, _, _ = select.select([self.proc.stdout], [], [], 0)
        return bool(ready) or self.proc.poll() is not None

    def receive(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the client agent exited with {self.proc.wait()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["ok"]

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def finish(self):
        """Reads the pending answer (if the agent lives) and stops it."""
        if self.proc.poll() is None:
            try:
                self.receive()
            except RuntimeError:
                pass
        self.close()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


class QueryError(Exception):
    pass


def queries_dir():
    return str(REPO / "testdata" / "tpch")


def wait_until(what, check, timeout=60, interval=0.5):
    deadline = time.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


os.environ.setdefault("PYTHONUNBUFFERED", "1")


TOXIPROXY = REPO / "integration" / ".toxiproxy" / "server"


class LatencyProxy:
    """toxiproxy on a host of its own, between the cluster's hosts: every
    connection through it gets `latency_ms` added on the way back (a round
    trip `latency_ms` longer: half of it per hop) and both directions a
    bandwidth cap of `rate_kb` KB/s."""

    API_PORT = 8474

    def __init__(self, cluster, latency_ms=1, rate_kb=125_000):
        self.cluster = cluster
        self.host = cluster.network.host("proxy")
        self.proc = self.host.start(
            [str(TOXIPROXY), "-host", self.host.address, "-port", str(self.API_PORT)],
            log=cluster.logs / "toxiproxy.log", piped=False)
        self.api = f"http://{self.host.address}:{self.API_PORT}"
        self.latency_ms = latency_ms
        self.rate_kb = rate_kb
        self.next_port = 20000
        wait_until("the proxy's API", self.ready, timeout=30, interval=0.2)

    def ready(self):
        try:
            self.cluster.client.call(op="http", url=f"{self.api}/version")
            return True
        except RuntimeError:
            return False

    def through(self, upstream):
        """The address that reaches `upstream` (host:port) through the
        proxy."""
        self.next_port += 1
        name = f"p{self.next_port}"
        listen = f"{self.host.address}:{self.next_port}"
        call = self.cluster.client.call
        call(op="http", url=f"{self.api}/proxies",
             json={"name": name, "listen": listen, "upstream": upstream, "enabled": True})
        toxics = [("latency", "downstream", {"latency": self.latency_ms, "jitter": 0}),
                  ("bandwidth", "downstream", {"rate": self.rate_kb}),
                  ("bandwidth", "upstream", {"rate": self.rate_kb})]
        for n, (kind, stream, attributes) in enumerate(toxics):
            call(op="http", url=f"{self.api}/proxies/{name}/toxics",
                 json={"name": f"{kind}{n}", "type": kind, "stream": stream, "toxicity": 1.0,
                       "attributes": attributes})
        return listen
