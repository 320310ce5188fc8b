"""DuckDB for squadron-bench: the best single-node engine on the same cores
and the same Parquet files, timed in its own process.

squadron-bench starts this with a Python that has `duckdb` (the test venv,
integration/requirements.txt) and talks JSON lines over stdin/stdout:

  {"tables": {"lineitem": "/path/lineitem.parquet", ...}}  -> {"ok": true}
  {"sql": "...", "runs": 3}  -> {"ms": [..], "rows": N}  or  {"error": "..."}

Each table is a view over its file (read in place, as Squadron and
DataFusion read it); a query's time is DuckDB's execute plus fetching the
whole answer as Arrow, measured here so the pipe is not counted.
"""

import json
import sys
import time

import duckdb


def main() -> None:
    con = duckdb.connect()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "tables" in request:
                for name, path in request["tables"].items():
                    con.execute(
                        f"CREATE OR REPLACE VIEW {name} AS "
                        f"SELECT * FROM read_parquet('{path}')"
                    )
                reply = {"ok": True, "version": duckdb.__version__}
            else:
                times, rows = [], 0
                for _ in range(max(1, int(request.get("runs", 1)))):
                    start = time.perf_counter()
                    rows = con.sql(request["sql"]).to_arrow_table().num_rows
                    times.append((time.perf_counter() - start) * 1000.0)
                reply = {"ms": times, "rows": rows}
        except Exception as error:  # reported to the bench, which stops
            reply = {"error": str(error)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
