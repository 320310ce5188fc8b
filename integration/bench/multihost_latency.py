"""How much of Squadron's speed is round trips: TPC-H on hosts linked
directly, and on the same hosts with toxiproxy between them adding
--latency-ms to every round trip (half of it per hop) and a bandwidth cap.

Two workers and two coordinators, each on a host (network namespace) of
its own (hosts.py): one coordinator reaches the workers directly, the
other through the proxy, so every hop of a query (coordinator to worker,
worker to worker for shuffles, results back, the client to the
coordinator) crosses it. Tables are read from local disk by path (the
hosts share it; only /tmp and data directories are private), so the
object store's speed does not enter. The queries run interleaved,
median of --iterations each; answers are compared between the two.

Needs root (network namespaces), a release build and toxiproxy
(./test.sh builds it into integration/.toxiproxy):

    cargo build --release --bins
    sudo integration/.venv/bin/python integration/bench/multihost_latency.py --scale 1
"""

import argparse
import json
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "integration" / "python"))

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import hosts  # noqa: E402
from warehouse_writes import tpch_tables  # noqa: E402

TPCH = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]
TOXIPROXY = REPO / "integration" / ".toxiproxy" / "server"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="1")
    parser.add_argument("--data-dir", default="squadron-data")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--latency-ms", type=int, default=1,
                        help="added to each round trip (toxiproxy's unit is 1 ms)")
    parser.add_argument("--rate-kb", type=int, default=125_000,
                        help="bandwidth cap per direction of a connection, KB/s")
    parser.add_argument("--queries", default=",".join(str(n) for n in range(1, 23)))
    parser.add_argument("--bin-dir", default=str(REPO / "target" / "release"))
    parser.add_argument("--json")
    args = parser.parse_args()
    reason = hosts.available()
    if reason:
        sys.exit(f"cannot make hosts here: {reason}")
    bin_dir = pathlib.Path(args.bin_dir)
    tables_dir = tpch_tables(bin_dir, args.data_dir, args.scale)
    net = hosts.Network("sqb", keep=[REPO, bin_dir, tables_dir, pathlib.Path(sys.prefix)])
    try:
        results = run(net, bin_dir, tables_dir, args)
    finally:
        net.close()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2))


def start(host, args):
    proc = host.start(args, private=["/tmp/data"])
    return hosts.banner_url(proc)


def run(net, bin_dir, tables_dir, args):
    import subprocess

    workers = []
    for n in range(2):
        host = net.host(f"w{n}")
        workers.append(start(host, [str(bin_dir / "squadron-worker"), "--listen",
                                    f"{host.address}:50061", "--insecure"]))
    proxy = net.host("proxy")
    proxy.start([str(TOXIPROXY), "-host", proxy.address, "-port", "8474"], piped=False)
    api = f"http://{proxy.address}:8474"
    port = [20000]

    def through(upstream):
        port[0] += 1
        name = f"p{port[0]}"
        listen = f"{proxy.address}:{port[0]}"
        post(net, api + "/proxies", {"name": name, "listen": listen, "upstream": upstream})
        for n, (kind, stream, attributes) in enumerate([
                ("latency", "downstream", {"latency": args.latency_ms, "jitter": 0}),
                ("bandwidth", "downstream", {"rate": args.rate_kb}),
                ("bandwidth", "upstream", {"rate": args.rate_kb})]):
            post(net, f"{api}/proxies/{name}/toxics",
                 {"name": f"t{n}", "type": kind, "stream": stream, "toxicity": 1.0,
                  "attributes": attributes})
        return listen

    time.sleep(1)
    tables = [f"--table={t}={tables_dir / (t + '.parquet')}" for t in TPCH]
    direct_host = net.host("cdirect")
    direct = start(direct_host, [str(bin_dir / "squadron-server"), "--listen",
                                 f"{direct_host.address}:50051", "--insecure",
                                 "--workers", ",".join(workers), "--data-dir", "/tmp/data", *tables])
    proxied_host = net.host("cproxied")
    proxied_workers = ["http://" + through(w.split("//")[1]) for w in workers]
    start(proxied_host, [str(bin_dir / "squadron-server"), "--listen",
                         f"{proxied_host.address}:50051", "--insecure",
                         "--workers", ",".join(proxied_workers), "--data-dir", "/tmp/data", *tables])
    proxied = "grpc://" + through(f"{proxied_host.address}:50051")
    client = net.host("client")
    script = pathlib.Path(__file__).parent / "latency_client.py"
    done = subprocess.run(
        ["ip", "netns", "exec", client.ns, sys.executable, str(script), direct, proxied,
         str(args.iterations), args.queries, str(args.latency_ms), str(args.rate_kb)],
        capture_output=True, text=True)
    print(done.stdout, end="")
    if done.returncode != 0:
        sys.exit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def post(net, url, body):
    import subprocess

    client_ns = net.hosts[0].ns
    subprocess.run(["ip", "netns", "exec", client_ns, "curl", "-s", "-f", "-X", "POST",
                    "-d", json.dumps(body), url], check=True, capture_output=True)


if __name__ == "__main__":
    main()
