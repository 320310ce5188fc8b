"""TPC-H from an S3-compatible store against the same files on local disk,
in one run: two coordinators over the same 2 worker processes, one with
the tables on local disk, one with them in an S3 server on loopback; the
queries run interleaved, median of --iterations each.

    cargo build --release --bins
    cargo install s3s-fs --version 0.14.1 --features binary --root ~/.s3s
    integration/.venv/bin/python integration/bench/object_store_tpch.py \\
        --scale 1 --data-dir squadron-data --s3s ~/.s3s/bin/s3s-fs --nginx /usr/sbin/nginx

The S3 server is s3s-fs (a Rust S3 server over a directory, from
crates.io) when --s3s is given, else moto's (Python). Both are slower
than Squadron's reads (s3s-fs serves a range at ~17 MB/s, moto slower),
so with --nginx a third column reads the same files over plain HTTP
(`http://` tables, object_store's HTTP client) from nginx, which serves
ranges at disk speed: that column measures Squadron's remote reads.

Uses the TPC-H data `squadron-server --demo` generates into --data-dir
(made first if missing). Prints a table and, with --json, writes it.
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "integration" / "python"))

from conftest import Process, free_port, tpch_query  # noqa: E402
from test_object_stores import BUCKET, REGION, TPCH, start_moto, wait_for_port  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="1")
    parser.add_argument("--data-dir", default="squadron-data")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--queries", default=",".join(str(n) for n in range(1, 23)))
    parser.add_argument("--bin-dir", default=str(REPO / "target" / "release"))
    parser.add_argument("--json")
    parser.add_argument("--s3s", help="the s3s-fs binary (else moto is the S3 server)")
    parser.add_argument("--nginx", help="the nginx binary: adds tables read over HTTP")
    args = parser.parse_args()

    import adbc_driver_flightsql.dbapi as flightsql
    import boto3

    bin_dir = pathlib.Path(args.bin_dir)
    data_dir = pathlib.Path(args.data_dir).resolve()
    tables_dir = data_dir / f"tpch-sf{args.scale}"
    credentials = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                   "AWS_REGION": REGION}
    servers = []
    if args.s3s:
        server, port = start_s3s(args.s3s, data_dir / "s3s-root")
    else:
        port = free_port()
        # Without IAM checks: any key is accepted.
        server = start_moto(port, auth_after=None)
    servers.append(server)
    endpoint = f"http://127.0.0.1:{port}"
    store = f"s3://?endpoint={endpoint}&allow_http=true"
    worker_stores = ["--store", store]
    if args.nginx:
        nginx, http_port = start_nginx(args.nginx, data_dir / "nginx", tables_dir)
        servers.append(nginx)
        http_store = f"http://127.0.0.1:{http_port}?allow_http=true"
        worker_stores += ["--store", http_store]
    processes = []
    try:
        workers = [
            Process([str(bin_dir / "squadron-worker"), "--listen", "127.0.0.1:0", "--insecure",
                     *worker_stores], env=credentials)
            for _ in range(2)
        ]
        processes += workers
        urls = ",".join(w.url for w in workers)
        local = Process([str(bin_dir / "squadron-server"), "--listen", "127.0.0.1:0",
                         "--insecure", "--workers", urls, "--demo", "--demo-scale", args.scale,
                         "--data-dir", str(data_dir)])
        processes.append(local)
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                          aws_access_key_id="bench", aws_secret_access_key="bench")
        s3.create_bucket(Bucket=BUCKET)
        for table in TPCH:
            s3.upload_file(str(tables_dir / f"{table}.parquet"), BUCKET,
                           f"sf/{table}/part-0.parquet")
        remote = Process(
            [str(bin_dir / "squadron-server"), "--listen", "127.0.0.1:0", "--insecure",
             "--workers", urls, "--data-dir", str(data_dir / "s3-bench"), "--store", store]
            + [arg for t in TPCH for arg in ("--table", f"{t}=s3://{BUCKET}/sf/{t}/")],
            env=credentials,
        )
        processes.append(remote)
        sources = {"local": local.url, "s3": remote.url}
        if args.nginx:
            http = Process(
                [str(bin_dir / "squadron-server"), "--listen", "127.0.0.1:0", "--insecure",
                 "--workers", urls, "--data-dir", str(data_dir / "http-bench"),
                 "--store", http_store]
                + [arg for t in TPCH
                   for arg in ("--table", f"{t}=http://127.0.0.1:{http_port}/{t}.parquet")],
            )
            processes.append(http)
            sources["http"] = http.url
        results = run(flightsql, sources, args)
    finally:
        for p in processes:
            p.stop()
        for server in servers:
            server.kill()
            server.wait()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2))


def start_s3s(binary, root):
    """s3s-fs serving a fresh directory (uploads store each object's ETag
    beside it; a file put there by hand would be hashed whole on every
    read)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--host", "127.0.0.1", "--port", str(port), "--access-key", "bench",
         "--secret-key", "bench", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, "s3s-fs")
    return proc, port


def start_nginx(binary, workdir, tables_dir):
    """nginx serving the table files (with byte ranges) on loopback."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = workdir / "nginx.conf"
    config.write_text(f"""
daemon off;
worker_processes 2;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 100000;
    client_body_temp_path {workdir}/body;
    proxy_temp_path {workdir}/proxy;
    fastcgi_temp_path {workdir}/fastcgi;
    uwsgi_temp_path {workdir}/uwsgi;
    scgi_temp_path {workdir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {tables_dir};
    }}
}}
""")
    proc = subprocess.Popen([binary, "-c", str(config), "-p", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port, "nginx")
    return proc, port


def run(flightsql, sources, args):
    names = list(sources)
    print(f"TPC-H SF{args.scale}, 2 worker processes, median of {args.iterations} (ms); "
          f"ratios to local")
    print(f"{'query':>5}" + "".join(f"{name:>10}" for name in names)
          + "".join(f"{name + '/local':>12}" for name in names[1:]))
    rows = []
    conns = {name: flightsql.connect(uri) for name, uri in sources.items()}
    try:
        for n in [int(q) for q in args.queries.split(",")]:
            sql = tpch_query(n)
            times = {name: [] for name in names}
            answers = {}
            for _ in range(args.iterations):
                for name in names:
                    with conns[name].cursor() as cur:
                        started = time.perf_counter()
                        cur.execute(sql)
                        table = cur.fetch_arrow_table()
                        times[name].append(time.perf_counter() - started)
                        answers[name] = table.num_rows
            assert len(set(answers.values())) == 1, f"q{n}: {answers}"
            row = {"query": f"q{n}"}
            row.update({f"{name}_ms": statistics.median(times[name]) * 1e3 for name in names})
            rows.append(row)
            print(f"{'q' + str(n):>5}" + "".join(f"{row[name + '_ms']:>10.1f}" for name in names)
                  + "".join(f"{row[name + '_ms'] / row['local_ms']:>12.2f}"
                            for name in names[1:]))
    finally:
        for conn in conns.values():
            conn.close()
    totals = {f"total_{name}_ms": sum(r[f"{name}_ms"] for r in rows) for name in names}
    print(f"{'total':>5}" + "".join(f"{totals[f'total_{name}_ms']:>10.1f}" for name in names)
          + "".join(f"{totals[f'total_{name}_ms'] / totals['total_local_ms']:>12.2f}"
                    for name in names[1:]))
    return {"scale": args.scale, "iterations": args.iterations, "queries": rows, **totals}


if __name__ == "__main__":
    main()
