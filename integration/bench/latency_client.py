"""The client of multihost_latency.py, run on a host of its own: TPC-H on
two coordinators (direct, through the proxy), interleaved (after one
untimed run of each query on each, alternating which goes first); prints
a table and, last, the figures as one JSON line.

    latency_client.py DIRECT_URI PROXIED_URI ITERATIONS QUERIES LATENCY_MS RATE_KB
"""

import json
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "integration" / "python"))

from answers import assert_same, is_ordered  # noqa: E402


def main():
    import adbc_driver_flightsql.dbapi as flightsql

    direct, proxied, iterations, queries, latency_ms, rate_kb = sys.argv[1:7]
    iterations = int(iterations)
    sources = {"direct": direct, "proxied": proxied}
    conns = {name: flightsql.connect(uri) for name, uri in sources.items()}
    print(f"TPC-H, 2 workers on hosts of their own; proxied: +{latency_ms} ms per round trip, "
          f"{int(rate_kb) // 1000} MB/s per direction; median of {iterations} (ms)")
    print(f"{'query':>5}{'direct':>10}{'proxied':>10}{'ratio':>8}")
    rows = []
    for n in [int(q) for q in queries.split(",")]:
        sql = (REPO / "testdata" / "tpch" / f"q{n}.sql").read_text()
        times = {name: [] for name in sources}
        answers = {}
        for name in sources:  # a first run of each warms caches, not timed
            with conns[name].cursor() as cur:
                cur.execute(sql)
                cur.fetch_arrow_table()
        for i in range(iterations):
            # Alternate which goes first: neither gets the warmer caches.
            for name in (list(sources) if i % 2 == 0 else list(reversed(sources))):
                with conns[name].cursor() as cur:
                    started = time.perf_counter()
                    cur.execute(sql)
                    table = cur.fetch_arrow_table()
                    times[name].append(time.perf_counter() - started)
                    answers[name] = table
        assert_same(answers["proxied"], answers["direct"], is_ordered(sql))
        row = {"query": f"q{n}",
               "direct_ms": statistics.median(times["direct"]) * 1e3,
               "proxied_ms": statistics.median(times["proxied"]) * 1e3}
        rows.append(row)
        print(f"{row['query']:>5}{row['direct_ms']:>10.1f}{row['proxied_ms']:>10.1f}"
              f"{row['proxied_ms'] / row['direct_ms']:>8.2f}")
    direct_total = sum(r["direct_ms"] for r in rows)
    proxied_total = sum(r["proxied_ms"] for r in rows)
    print(f"{'total':>5}{direct_total:>10.1f}{proxied_total:>10.1f}"
          f"{proxied_total / direct_total:>8.2f}")
    print(json.dumps({"queries": rows, "direct_ms": direct_total,
                      "proxied_ms": proxied_total}))


if __name__ == "__main__":
    main()
