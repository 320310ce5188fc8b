"""TPC-H from an S3-compatible store against the same files on local disk,
in one run: two coordinators over the same 2 worker processes, one with
the tables on local disk, one with them in moto's S3 server on loopback;
the queries run interleaved, median of --iterations each.

    cargo build --release --bins
    integration/.venv/bin/python integration/bench/object_store_tpch.py \\
        --scale 1 --data-dir squadron-data

Uses the TPC-H data `squadron-server --demo` generates into --data-dir
(made first if missing). Prints a table and, with --json, writes it.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "integration" / "python"))

from conftest import Process, free_port, tpch_query  # noqa: E402
from test_object_stores import BUCKET, REGION, TPCH, start_moto  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="1")
    parser.add_argument("--data-dir", default="squadron-data")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--queries", default=",".join(str(n) for n in range(1, 23)))
    parser.add_argument("--bin-dir", default=str(REPO / "target" / "release"))
    parser.add_argument("--json")
    args = parser.parse_args()

    import adbc_driver_flightsql.dbapi as flightsql
    import boto3

    bin_dir = pathlib.Path(args.bin_dir)
    data_dir = pathlib.Path(args.data_dir).resolve()
    tables_dir = data_dir / f"tpch-sf{args.scale}"
    credentials = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                   "AWS_REGION": REGION}
    port = free_port()
    # Without IAM checks: any key is accepted.
    moto = start_moto(port, auth_after=None)
    endpoint = f"http://127.0.0.1:{port}"
    store = f"s3://?endpoint={endpoint}&allow_http=true"
    processes = []
    try:
        workers = [
            Process([str(bin_dir / "squadron-worker"), "--listen", "127.0.0.1:0", "--insecure",
                     "--store", store], env=credentials)
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
        results = run(flightsql, local.url, remote.url, args)
    finally:
        for p in processes:
            p.stop()
        moto.kill()
        moto.wait()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2))


def run(flightsql, local_uri, s3_uri, args):
    print(f"TPC-H SF{args.scale}, 2 worker processes, median of {args.iterations} (ms)")
    print(f"{'query':>5} {'local':>10} {'s3':>10} {'ratio':>7}")
    rows = []
    with flightsql.connect(local_uri) as local, flightsql.connect(s3_uri) as s3:
        for n in [int(q) for q in args.queries.split(",")]:
            sql = tpch_query(n)
            times = {"local": [], "s3": []}
            answers = {}
            for _ in range(args.iterations):
                for name, conn in (("local", local), ("s3", s3)):
                    with conn.cursor() as cur:
                        started = time.perf_counter()
                        cur.execute(sql)
                        table = cur.fetch_arrow_table()
                        times[name].append(time.perf_counter() - started)
                        answers[name] = table.num_rows
            assert answers["local"] == answers["s3"], f"q{n}: {answers}"
            local_ms = statistics.median(times["local"]) * 1e3
            s3_ms = statistics.median(times["s3"]) * 1e3
            rows.append({"query": f"q{n}", "local_ms": local_ms, "s3_ms": s3_ms})
            print(f"{'q' + str(n):>5} {local_ms:>10.1f} {s3_ms:>10.1f} {s3_ms / local_ms:>7.2f}")
    total_local = sum(r["local_ms"] for r in rows)
    total_s3 = sum(r["s3_ms"] for r in rows)
    print(f"{'total':>5} {total_local:>10.1f} {total_s3:>10.1f} {total_s3 / total_local:>7.2f}")
    return {"scale": args.scale, "iterations": args.iterations, "queries": rows,
            "total_local_ms": total_local, "total_s3_ms": total_s3}


if __name__ == "__main__":
    main()
