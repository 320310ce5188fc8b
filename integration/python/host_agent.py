"""A client on a host of its own (see hosts.py): the multi-host tests run it
inside the client host's network namespace and send it one JSON request
per line on stdin; it answers one JSON line each on stdout. It is the only
process that talks to the cluster and the object store from there.

Requests ("op"):
- sql: statements in order on one ADBC connection; each answer is
  {"rows": [...]} or {"error": "..."}.
- tpch: the 22 TPC-H queries against single-node DataFusion over the
  local Parquet files; the queries whose answers differ.
- concurrent: `clients` threads each inserting `inserts` single rows into
  `table` while `updaters` more rewrite it with UPDATE until they are
  done; which inserts and updates succeeded, and how the others failed.
- ingest: bulk ingest of `rows` generated rows; with `die_after`, the
  process exits after that many batches were handed to the driver (a
  client hanging up mid-upload).
- s3: object store calls (create a bucket, upload a directory, list keys,
  list unfinished multipart uploads).
- http: GET a URL (metrics of a worker), or POST `json` to it (the
  latency proxy's API).
"""

import json
import os
import pathlib
import sys
import threading
import time
import traceback
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))

import adbc_driver_flightsql.dbapi as flightsql  # noqa: E402
import pyarrow as pa  # noqa: E402

from answers import assert_same, is_ordered  # noqa: E402


def connect(uri):
    return flightsql.connect(uri, autocommit=True)


def plain(value):
    """A value JSON can carry."""
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def run_sql(uri, statements):
    answers = []
    with connect(uri) as conn:
        for sql in statements:
            try:
                with conn.cursor() as cur:
                    cur.execute(sql)
                    table = cur.fetch_arrow_table()
                rows = [[plain(v) for v in row.values()] for row in table.to_pylist()]
                answers.append({"rows": rows})
            except Exception as e:  # noqa: BLE001 - the error is the answer
                answers.append({"error": str(e)})
    return answers


def tpch(uri, data_dir, queries_dir):
    import datafusion

    oracle = datafusion.SessionContext()
    for f in sorted(pathlib.Path(data_dir).glob("*.parquet")):
        oracle.register_parquet(f.stem, str(f))
    failures = {}
    with connect(uri) as conn:
        for n in range(1, 23):
            sql = (pathlib.Path(queries_dir) / f"q{n}.sql").read_text()
            try:
                with conn.cursor() as cur:
                    cur.execute(sql)
                    actual = cur.fetch_arrow_table()
                expected = oracle.sql(sql).to_arrow_table()
                assert_same(actual, expected, is_ordered(sql))
            except Exception as e:  # noqa: BLE001
                failures[f"q{n}"] = str(e)[:500]
    return failures


def concurrent(uri, table, clients, inserts, updaters=1):
    """Inserters and `updaters` updaters at once; what each statement
    answered."""
    done = threading.Event()
    inserted, insert_errors = [], []
    updates, update_errors = [], []
    lock = threading.Lock()

    def insert(client):
        with connect(uri) as conn:
            for i in range(inserts):
                key = client * 1000 + i
                try:
                    with conn.cursor() as cur:
                        cur.execute(f"INSERT INTO {table} VALUES ({key}, 0)")
                        cur.fetchall()
                    with lock:
                        inserted.append(key)
                except Exception as e:  # noqa: BLE001
                    with lock:
                        insert_errors.append(str(e)[:300])

    def update():
        with connect(uri) as conn:
            while not done.is_set():
                try:
                    with conn.cursor() as cur:
                        cur.execute(f"UPDATE {table} SET v = v + 1")
                        changed = cur.fetchall()[0][0]
                    with lock:
                        updates.append(changed)
                except Exception as e:  # noqa: BLE001
                    with lock:
                        update_errors.append(str(e)[:300])

    rewriters = [threading.Thread(target=update) for _ in range(updaters)]
    for t in rewriters:
        t.start()
    threads = [threading.Thread(target=insert, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    for t in rewriters:
        t.join()
    return {"inserted": inserted, "insert_errors": insert_errors,
            "updates": updates, "update_errors": update_errors}


def ingest(uri, table, rows, batch_rows, mode, die_after=None):
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])

    def batches():
        for n, start in enumerate(range(0, rows, batch_rows)):
            if die_after is not None and n == die_after:
                os._exit(3)
            keys = pa.array(range(start, min(start + batch_rows, rows)), pa.int64())
            text = pa.array([f"row {k} " + "x" * 40 for k in keys.to_pylist()])
            yield pa.record_batch([keys, text], schema=schema)

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    with connect(uri) as conn, conn.cursor() as cur:
        return {"rows": cur.adbc_ingest(table, reader, mode=mode)}


def s3(request):
    import boto3

    client = boto3.client("s3", endpoint_url=request["endpoint"], region_name="us-east-1",
                          aws_access_key_id=request["key"],
                          aws_secret_access_key=request["secret"])
    bucket = request["bucket"]
    action = request["action"]
    if action == "create_bucket":
        client.create_bucket(Bucket=bucket)
        return {}
    if action == "upload":
        for f in sorted(pathlib.Path(request["dir"]).glob("*.parquet")):
            client.upload_file(str(f), bucket, f"{request['prefix']}/{f.stem}/{f.name}")
        return {}
    if action == "list":
        keys = []
        for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=request["prefix"]):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return {"keys": keys}
    if action == "get":
        body = client.get_object(Bucket=bucket, Key=request["key_name"])["Body"].read()
        return {"text": body.decode()}
    if action == "uploads":
        listed = client.list_multipart_uploads(Bucket=bucket, Prefix=request["prefix"])
        return {"keys": [u["Key"] for u in listed.get("Uploads", [])]}
    raise ValueError(f"unknown s3 action {action}")


def handle(request):
    op = request["op"]
    if op == "sql":
        return {"answers": run_sql(request["uri"], request["sql"])}
    if op == "tpch":
        return {"failures": tpch(request["uri"], request["data_dir"], request["queries_dir"])}
    if op == "concurrent":
        return concurrent(request["uri"], request["table"], request["clients"],
                          request["inserts"], request.get("updaters", 1))
    if op == "ingest":
        return ingest(request["uri"], request["table"], request["rows"],
                      request["batch_rows"], request["mode"], request.get("die_after"))
    if op == "s3":
        return s3(request)
    if op == "http":
        body = request.get("json")
        data = None if body is None else json.dumps(body).encode()
        http_request = urllib.request.Request(
            request["url"], data=data, method="POST" if data is not None else "GET",
            headers={"Content-Type": "application/json"})
        return {"text": urllib.request.urlopen(http_request, timeout=10).read().decode()}
    if op == "wait":
        time.sleep(request["seconds"])
        return {}
    raise ValueError(f"unknown op {op}")


def main():
    print("agent ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"ok": handle(request)}
        except Exception as e:  # noqa: BLE001
            answer = {"error": f"{e}\n{traceback.format_exc()}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
