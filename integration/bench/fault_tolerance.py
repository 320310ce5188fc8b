"""Chaos at a scale where queries run for seconds: a worker SIGKILLed at
about 30 %, 60 % and 90 % of a query's failure-free time, in the
fault-tolerant mode (`SET squadron.retry_policy = 'task'`) and, at 60 %,
in the default mode. Two `squadron-worker` processes and a coordinator
(release build); the killed worker is restarted on its port before the
next run.

    cargo build --release --bins
    integration/.venv/bin/python integration/bench/fault_tolerance.py --scale 1

For each query: after a warm-up run, the failure-free seconds of both
modes (alternated, median of --iterations each, so the fault-tolerant
mode's cost is their ratio), then per
failure the seconds, their ratio to the failure-free run of the same mode,
the tasks run again (`squadron_task_reruns_total`) out of the job's tasks
(those a failure-free run finished), the rows the client had read when
the worker died,
and whether the answer equals single-node DataFusion's over the same
Parquet files (`SELECT * FROM lineitem` by row count and column sums).
Prints a table and, with --json, writes it. `--fractions ''` measures only
the failure-free runs of both modes (e.g. `--queries 1,2,…,22`: the
fault-tolerant mode's cost on all of TPC-H, both modes in one run).
"""

import argparse
import json
import pathlib
import statistics
import sys
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "integration" / "python"))
sys.path.insert(0, str(REPO / "integration" / "bench"))

from answers import assert_same, is_ordered  # noqa: E402
from conftest import Process, free_port, oracle_over, scrape, tpch_query  # noqa: E402
from warehouse_writes import tpch_tables  # noqa: E402

LINEITEM = "SELECT * FROM lineitem"
# A whole-table answer is compared by its size and sums, not row by row.
LINEITEM_CHECK = ("SELECT count(*) AS n, sum(l_orderkey) AS k, sum(l_linenumber) AS l, "
                  "sum(l_quantity) AS q FROM lineitem")


def summary(table):
    import pyarrow.compute as pc

    return [table.num_rows, pc.sum(table["l_orderkey"]).as_py(),
            pc.sum(table["l_linenumber"]).as_py(), pc.sum(table["l_quantity"]).as_py()]


class Cluster:
    """Two workers and a coordinator; `kill(i)` and `restart(i)` a worker."""

    def __init__(self, bin_dir, tables_dir):
        self.bin_dir = bin_dir
        self.ports = [free_port(), free_port()]
        self.workers = [self._worker(p) for p in self.ports]
        self.metrics = free_port()
        tables = [f"--table={f.stem}={f}" for f in sorted(tables_dir.glob("*.parquet"))]
        self.coordinator = Process(
            [str(bin_dir / "squadron-server"), "--listen", "127.0.0.1:0", "--insecure",
             "--workers", ",".join(w.url for w in self.workers), "--health-interval", "0.5",
             "--metrics-listen", f"127.0.0.1:{self.metrics}", *tables])

    def _worker(self, port):
        return Process([str(self.bin_dir / "squadron-worker"), "--listen",
                        f"127.0.0.1:{port}", "--insecure"])

    def kill(self, i):
        self.workers[i].stop()

    def restart(self, i):
        self.workers[i] = self._worker(self.ports[i])
        # Health probes every 0.5 s: a probe that passes puts it back.
        time.sleep(2)

    def counter(self, name):
        return sum(v for k, v in scrape(self.metrics).items()
                   if k == name or k.startswith(name + "{"))

    def stop(self):
        for p in [self.coordinator, *self.workers]:
            p.stop()


def run(cluster, sql, policy, kill_after=None):
    """Seconds, answer, error, tasks run again, tasks finished, and rows the
    client had read when the worker was killed, of one run; with
    `kill_after` seconds, worker 1 is SIGKILLed then and restarted after
    the answer."""
    import adbc_driver_flightsql.dbapi as flightsql
    import pyarrow as pa

    reruns = cluster.counter("squadron_task_reruns_total")
    tasks = cluster.counter("squadron_tasks_total")
    killer, read = None, [0]
    read_at_kill = []

    def kill():
        read_at_kill.append(read[0])
        cluster.kill(1)

    with flightsql.connect(cluster.coordinator.url) as conn, conn.cursor() as cur:
        cur.execute(f"SET squadron.retry_policy = '{policy}'")
        started = time.perf_counter()
        if kill_after is not None:
            killer = threading.Timer(kill_after, kill)
            killer.start()
        try:
            cur.execute(sql)
            reader = cur.fetch_record_batch()
            batches = []
            for batch in reader:
                batches.append(batch)
                read[0] += batch.num_rows
            answer, error = pa.Table.from_batches(batches, reader.schema), None
        except Exception as e:  # the default mode may fail after rows were sent
            answer, error = None, str(e).splitlines()[0][:160]
        seconds = time.perf_counter() - started
    if killer is not None:
        killer.join()
        cluster.restart(1)
    return (seconds, answer, error,
            cluster.counter("squadron_task_reruns_total") - reruns,
            cluster.counter("squadron_tasks_total") - tasks,
            read_at_kill[0] if read_at_kill else 0)


def check(answer, expected, sql):
    if answer is None:
        return "error"
    try:
        if sql == LINEITEM:
            assert summary(answer) == expected, f"{summary(answer)} != {expected}"
        else:
            assert_same(answer, expected, is_ordered(sql))
        return "equal"
    except AssertionError as e:
        return f"DIFFERS: {e}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="1")
    parser.add_argument("--data-dir", default="squadron-data")
    parser.add_argument("--bin-dir", default=str(REPO / "target" / "release"))
    parser.add_argument("--queries", default="9,18,21,lineitem")
    parser.add_argument("--fractions", default="0.3,0.6,0.9")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()

    bin_dir = pathlib.Path(args.bin_dir)
    tables_dir = tpch_tables(bin_dir, args.data_dir, args.scale)
    oracle = oracle_over(tables_dir)
    fractions = [float(f) for f in args.fractions.split(",") if f]
    cluster = Cluster(bin_dir, tables_dir)
    results = []
    totals = {"query": 0.0, "task": 0.0}
    try:
        print(f"SF{args.scale}, 2 workers, worker 1 SIGKILLed at a share of the failure-free "
              f"time; failure-free: median of {args.iterations}")
        print(f"{'query':<9}{'mode':<7}{'kill at':>8}{'seconds':>9}{'ratio':>7}"
              f"{'re-run':>8}{'tasks':>7}{'rows read at kill':>18}  answer")
        for name in args.queries.split(","):
            sql = LINEITEM if name == "lineitem" else tpch_query(int(name))
            if sql == LINEITEM:
                expected = summary_of(oracle)
            else:
                expected = oracle.sql(sql).to_arrow_table()
            base, job_tasks = {}, 0
            run(cluster, sql, "query")  # warm-up: the files into the page cache
            # The modes alternate, so drift hits both alike.
            all_runs = {"query": [], "task": []}
            for _ in range(args.iterations):
                for policy in all_runs:
                    all_runs[policy].append(run(cluster, sql, policy))
            for policy, runs in all_runs.items():
                seconds = statistics.median(r[0] for r in runs)
                base[policy] = seconds
                tasks = job_tasks = runs[-1][4]
                row = {"query": name, "mode": policy, "kill_at": None, "seconds": seconds,
                       "ratio": 1.0, "tasks_rerun": 0, "tasks": tasks, "rows_before_kill": 0,
                       "answer": check(runs[-1][1], expected, sql)}
                results.append(row)
                print_row(row)
            print(f"{name:<9}task/query failure-free: {base['task'] / base['query']:.2f}x")
            for policy in totals:
                totals[policy] += base[policy]
            kills = [("task", f) for f in fractions] + [("query", 0.6)] * bool(fractions)
            for policy, fraction in kills:
                seconds, answer, error, rerun, _, before = run(
                    cluster, sql, policy, kill_after=fraction * base[policy])
                row = {"query": name, "mode": policy, "kill_at": fraction, "seconds": seconds,
                       "ratio": seconds / base[policy], "tasks_rerun": rerun, "tasks": job_tasks,
                       "rows_before_kill": before,
                       "answer": error or check(answer, expected, sql)}
                results.append(row)
                print_row(row)
        print(f"failure-free total: query {totals['query']:.2f} s, task {totals['task']:.2f} s, "
              f"ratio {totals['task'] / totals['query']:.2f}x")
    finally:
        cluster.stop()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


def summary_of(oracle):
    row = oracle.sql(LINEITEM_CHECK).to_arrow_table().to_pylist()[0]
    return [row["n"], row["k"], row["l"], row["q"]]


def print_row(row):
    kill = "-" if row["kill_at"] is None else f"{row['kill_at']:.0%}"
    print(f"{row['query']:<9}{row['mode']:<7}{kill:>8}{row['seconds']:>9.2f}"
          f"{row['ratio']:>7.2f}{int(row['tasks_rerun']):>8}{int(row['tasks']):>7}"
          f"{row['rows_before_kill']:>18}  "
          f"{row['answer']}", flush=True)


if __name__ == "__main__":
    main()
