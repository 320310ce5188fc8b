"""CREATE TABLE AS SELECT * FROM lineitem into the warehouse: on local disk
and in an S3 server (moto's, on loopback), written by the workers (this
build), against the coordinator writing every file (an earlier build,
given with --old-bin-dir; it had no warehouse, so local disk only).
Each run on fresh processes (2 workers and a coordinator), median of
--iterations: seconds, rows/s, the coordinator's CPU seconds and peak RSS.

    cargo build --release --bins
    # an earlier build, e.g. of the commit before the warehouse:
    git worktree add /tmp/old f7fc0fe && (cd /tmp/old && \\
        CARGO_TARGET_DIR=/tmp/old-target cargo build --release --bins)
    integration/.venv/bin/python integration/bench/warehouse_writes.py \\
        --scale 1 --old-bin-dir /tmp/old-target/release

Uses the TPC-H data `squadron-server --demo` generates into --data-dir
(made first if missing). Prints a table and, with --json, writes it.
"""

import argparse
import json
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "integration" / "python"))

from conftest import Process, free_port  # noqa: E402
from test_object_stores import REGION, start_moto  # noqa: E402

BUCKET = "warehouse"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
               "AWS_REGION": REGION}


def tpch_tables(bin_dir, data_dir, scale):
    """The directory of the TPC-H Parquet files `squadron-server --demo`
    generates into `data_dir` (made first if missing)."""
    tables_dir = pathlib.Path(data_dir).resolve() / f"tpch-sf{scale}"
    if not tables_dir.exists():
        Process([str(bin_dir / "squadron-server"), "--demo", "--demo-scale", scale,
                 "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"]).stop()
    return tables_dir


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = 100  # os.sysconf("SC_CLK_TCK") on Linux
    return (int(fields[11]) + int(fields[12])) / ticks


def peak_rss_mib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_run(bin_dir, tables_dir, warehouse_args, env):
    """Fresh workers and coordinator; the CTAS's seconds, rows and the
    coordinator's CPU seconds and peak RSS over it."""
    import adbc_driver_flightsql.dbapi as flightsql

    scratch = pathlib.Path(tempfile.mkdtemp(prefix="squadron-bench-"))
    # Each run a warehouse of its own (the store keeps the last run's).
    warehouse_args = {side: [a.replace("{run}", scratch.name) for a in args]
                      for side, args in warehouse_args.items()}
    processes = []
    try:
        workers = [Process([str(bin_dir / "squadron-worker"), "--listen", "127.0.0.1:0",
                            "--insecure", *warehouse_args["worker"]], env=env)
                   for _ in range(2)]
        processes += workers
        tables = [f"--table={t}={tables_dir / (t + '.parquet')}" for t in ("lineitem",)]
        coordinator = Process(
            [str(bin_dir / "squadron-server"), "--listen", "127.0.0.1:0", "--insecure",
             "--workers", ",".join(w.url for w in workers), "--data-dir", str(scratch),
             *tables, *warehouse_args["coordinator"]], env=env)
        processes.append(coordinator)
        pid = coordinator.proc.pid
        with flightsql.connect(coordinator.url) as conn, conn.cursor() as cur:
            cpu = cpu_seconds(pid)
            started = time.perf_counter()
            cur.execute("CREATE TABLE li2 AS SELECT * FROM lineitem")
            cur.fetchall()
            seconds = time.perf_counter() - started
            cpu = cpu_seconds(pid) - cpu
            cur.execute("SELECT count(*) FROM li2")
            rows = cur.fetchall()[0][0]
        return seconds, rows, cpu, peak_rss_mib(pid)
    finally:
        for p in processes:
            p.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="1")
    parser.add_argument("--data-dir", default="squadron-data")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--bin-dir", default=str(REPO / "target" / "release"))
    parser.add_argument("--old-bin-dir", help="an earlier build: the coordinator writes")
    parser.add_argument("--json")
    args = parser.parse_args()
    import boto3

    bin_dir = pathlib.Path(args.bin_dir)
    tables_dir = tpch_tables(bin_dir, args.data_dir, args.scale)
    port = free_port()
    moto = start_moto(port, auth_after=None)
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="bench",
                 aws_secret_access_key="bench").create_bucket(Bucket=BUCKET)
    store = ["--store", f"s3://?endpoint={endpoint}&allow_http=true"]
    s3_warehouse = ["--warehouse", f"s3://{BUCKET}/{{run}}/"]
    setups = [("local disk, workers write", bin_dir, {"worker": [], "coordinator": []}),
              ("S3 (moto), workers write", bin_dir,
               {"worker": store + s3_warehouse, "coordinator": store + s3_warehouse})]
    if args.old_bin_dir:
        setups.append(("local disk, coordinator writes (earlier build)",
                       pathlib.Path(args.old_bin_dir), {"worker": [], "coordinator": []}))
    results = []
    try:
        print(f"CREATE TABLE AS SELECT * FROM lineitem, SF{args.scale}, 2 workers, "
              f"median of {args.iterations}")
        print(f"{'setup':<48}{'seconds':>9}{'Mrows/s':>9}{'coord CPU s':>12}{'coord RSS MiB':>14}")
        for name, binaries, warehouse in setups:
            runs = [one_run(binaries, tables_dir, warehouse, CREDENTIALS)
                    for _ in range(args.iterations)]
            seconds = statistics.median(r[0] for r in runs)
            rows = runs[0][1]
            row = {"setup": name, "seconds": seconds, "rows": rows,
                   "rows_per_second": rows / seconds,
                   "coordinator_cpu_seconds": statistics.median(r[2] for r in runs),
                   "coordinator_peak_rss_mib": statistics.median(r[3] for r in runs)}
            results.append(row)
            print(f"{name:<48}{seconds:>9.2f}{rows / seconds / 1e6:>9.2f}"
                  f"{row['coordinator_cpu_seconds']:>12.2f}{row['coordinator_peak_rss_mib']:>14.0f}")
    finally:
        moto.kill()
        moto.wait()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
