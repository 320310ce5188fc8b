"""Tables where clusters keep them: an S3-compatible store (moto's server,
started here on loopback with IAM checks on), Azure Blob Storage (the
Azurite emulator from npm, on loopback), the common file formats and
a hive-partitioned directory, all through Flight SQL on 2 worker processes
and compared with single-node DataFusion over the local files."""

import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.request

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from answers import assert_same, is_ordered
from conftest import (BIN_DIR, REPO, Process, expect_error, fetch, free_port, oracle_over,
                      tpch_query)

BUCKET = "tpch"
REGION = "us-east-1"
TPCH = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]


def start_moto(port, auth_after=3):
    """moto's S3/IAM server. Requests need IAM credentials after the first
    `auth_after` actions (which create them); any key works with None."""
    checks = {} if auth_after is None else {"INITIAL_NO_AUTH_ACTION_COUNT": str(auth_after)}
    proc = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H", "127.0.0.1",
         "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, **checks},
    )
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
            return proc
        except OSError:
            assert time.time() < deadline, "moto_server did not start"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def s3(cluster, formats_dir):
    import boto3

    port = free_port()
    moto = start_moto(port)
    endpoint = f"http://127.0.0.1:{port}"
    boot = dict(endpoint_url=endpoint, region_name=REGION,
                aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
    iam = boto3.client("iam", **boot)
    iam.create_user(UserName="squadron")
    key = iam.create_access_key(UserName="squadron")["AccessKey"]
    iam.put_user_policy(UserName="squadron", PolicyName="all", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
    }))
    credentials = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                   "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"], "AWS_REGION": REGION}
    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                          aws_access_key_id=key["AccessKeyId"],
                          aws_secret_access_key=key["SecretAccessKey"])
    client.create_bucket(Bucket=BUCKET)
    for table in TPCH:
        client.upload_file(str(cluster["data"] / f"{table}.parquet"), BUCKET,
                           f"sf/{table}/part-0.parquet")
    delta = formats_dir / "nation_delta"
    for file in delta.rglob("*"):
        if file.is_file():
            client.upload_file(str(file), BUCKET, f"delta/nation/{file.relative_to(delta)}")
    yield {"endpoint": endpoint, "port": port, "credentials": credentials}
    moto.kill()
    moto.wait()


def write_avro(path, table):
    """An Avro object container file of `table` (long and string columns,
    no codec): pyarrow writes no Avro, and this is all a reader needs."""
    def long(n):
        n = (n << 1) ^ (n >> 63)
        out = b""
        while n & ~0x7F:
            out += bytes([(n & 0x7F) | 0x80])
            n >>= 7
        return out + bytes([n])

    def string(s):
        data = s.encode()
        return long(len(data)) + data

    types = {pa.int64(): "long", pa.int32(): "long", pa.string(): "string",
             pa.large_string(): "string", pa.string_view(): "string"}
    fields = [{"name": f.name, "type": types[f.type]} for f in table.schema]
    schema = json.dumps({"type": "record", "name": "row", "fields": fields})
    sync = b"0123456789abcdef"
    header = b"Obj\x01" + long(2) + string("avro.schema") + string(schema)
    header += string("avro.codec") + string("null") + long(0) + sync
    body = b""
    for row in table.to_pylist():
        for f in fields:
            value = row[f["name"]]
            body += long(value) if f["type"] == "long" else string(value)
    block = long(table.num_rows) + long(len(body)) + body + sync
    path.write_bytes(header + block)


@pytest.fixture(scope="module")
def formats_dir(cluster, tmp_path_factory):
    """`nation` in every format, and `lineitem` partitioned by return flag."""
    out = tmp_path_factory.mktemp("formats")
    nation = pq.read_table(cluster["data"] / "nation.parquet")
    nation = nation.cast(pa.schema([
        pa.field(f.name, pa.int64() if pa.types.is_integer(f.type) else pa.string())
        for f in nation.schema
    ]))
    pq.write_table(nation, out / "nation.parquet")
    pacsv.write_csv(nation, out / "nation.csv")
    with open(out / "nation.json", "w") as f:
        for row in nation.to_pylist():
            f.write(json.dumps(row) + "\n")
    with ipc.new_file(out / "nation.arrow", nation.schema) as writer:
        writer.write_table(nation)
    write_avro(out / "nation.avro", nation)
    # Two versions: the second deletes a region's rows by rewriting files.
    write_deltalake(str(out / "nation_delta"), nation, partition_by=["n_regionkey"])
    DeltaTable(str(out / "nation_delta")).delete("n_nationkey % 2 = 0")
    lineitem = pq.read_table(cluster["data"] / "lineitem.parquet")
    lineitem = lineitem.cast(pa.schema([
        pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type)
        for f in lineitem.schema
    ]))
    pq.write_to_dataset(lineitem, out / "lineitem_by_flag", partition_cols=["l_returnflag"])
    return out


@pytest.fixture(scope="module")
def s3_cluster(s3, formats_dir, tmp_path_factory):
    """A coordinator and 2 worker processes with the store's credentials in
    their environment; TPC-H tables on S3, the other formats local."""
    # Every bucket on the test server; one bucket on a port nobody serves.
    store = f"s3://?endpoint={s3['endpoint']}&allow_http=true"
    unreachable = f"s3://unreachable?endpoint=http://127.0.0.1:{free_port()}&allow_http=true"
    logs = tmp_path_factory.mktemp("s3-logs")
    workers = [
        Process([str(BIN_DIR / "squadron-worker"), "--listen", "127.0.0.1:0", "--insecure",
                 "--store", store, "--store", unreachable],
                stderr=logs / f"worker-{i}.log", env=s3["credentials"])
        for i in range(2)
    ]
    tables = [f"{t}=s3://{BUCKET}/sf/{t}/" for t in TPCH]
    tables += [f"nation_{fmt}={formats_dir / ('nation.' + fmt)}"
               for fmt in ["parquet", "csv", "json", "avro", "arrow"]]
    tables.append(f"lineitem_by_flag={formats_dir / 'lineitem_by_flag'}")
    server = Process(
        [str(BIN_DIR / "squadron-server"), "--listen", "127.0.0.1:0", "--insecure",
         # Small tables: read by the workers all the same, which is what is tested.
         "--coordinator-scan-limit", "0",
         "--workers", ",".join(w.url for w in workers),
         "--data-dir", str(tmp_path_factory.mktemp("s3-data")),
         "--store", store, "--store", unreachable,
         "--data-root", f"s3://{BUCKET}", "--data-root", "s3://missing-bucket",
         "--data-root", "s3://unreachable", "--data-root", str(formats_dir)]
        + [arg for t in tables for arg in ("--table", t)],
        stderr=logs / "coordinator.log", env=s3["credentials"],
    )
    yield {"uri": server.url, "logs": logs}
    server.stop()
    for w in workers:
        w.stop()


@pytest.fixture(scope="module")
def conn(s3_cluster):
    with flightsql.connect(s3_cluster["uri"]) as conn:
        yield conn


@pytest.mark.parametrize("n", range(1, 23))
def test_tpch_from_s3_matches_local_files(conn, oracle, n):
    sql = tpch_query(n)
    actual = fetch(conn, sql)
    expected = oracle.sql(sql).to_arrow_table()
    assert actual.column_names == expected.column_names
    assert_same(actual, expected, is_ordered(sql))


def test_scans_of_s3_files_are_split_across_tasks(conn):
    plan = dict(zip(*fetch(conn, "EXPLAIN SELECT sum(l_quantity) FROM lineitem").to_pydict().values()))
    scan = re.search(r"Stage 0 tasks=(\d+)", plan["distributed_plan"])
    assert scan and int(scan.group(1)) >= 2, plan["distributed_plan"]
    # One file, read in byte ranges by several tasks.
    ranges = re.findall(r"sf/lineitem/part-0\.parquet:\d+\.\.\d+", plan["distributed_plan"])
    assert len(ranges) == int(scan.group(1)), plan["distributed_plan"]


def test_created_external_table_on_s3_reads_through_flight_sql(conn, oracle):
    with conn.cursor() as cur:
        cur.execute(f"CREATE EXTERNAL TABLE s3_orders STORED AS PARQUET "
                    f"LOCATION 's3://{BUCKET}/sf/orders/'")
    sql = "SELECT o_orderstatus, count(*) AS n FROM {} GROUP BY o_orderstatus ORDER BY 1"
    assert_same(fetch(conn, sql.format("s3_orders")),
                oracle.sql(sql.format("orders")).to_arrow_table(), True)


def test_delta_table_on_s3_reads_its_latest_version(conn, formats_dir):
    import datafusion

    with conn.cursor() as cur:
        cur.execute(f"CREATE EXTERNAL TABLE s3_delta_nation STORED AS DELTA "
                    f"LOCATION 's3://{BUCKET}/delta/nation/'")
    sql = "SELECT n_regionkey, count(*) AS n, min(n_name) AS first FROM {} " \
          "GROUP BY n_regionkey ORDER BY n_regionkey"
    ctx = datafusion.SessionContext()
    rows = DeltaTable(str(formats_dir / "nation_delta")).to_pyarrow_table()
    assert rows.num_rows == 12
    ctx.register_record_batches("nation", [rows.to_batches()])
    assert_same(fetch(conn, sql.format("s3_delta_nation")),
                ctx.sql(sql.format("nation")).to_arrow_table(), True)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "avro", "arrow"])
def test_every_file_format_answers_like_single_node(conn, formats_dir, fmt):
    import datafusion

    sql = "SELECT n_regionkey, count(*) AS n, min(n_name) AS first FROM {} " \
          "GROUP BY n_regionkey ORDER BY n_regionkey"
    ctx = datafusion.SessionContext()
    ctx.register_parquet("nation", str(formats_dir / "nation.parquet"))
    expected = ctx.sql(sql.format("nation")).to_arrow_table()
    assert_same(fetch(conn, sql.format(f"nation_{fmt}")), expected, True)


def test_hive_partitions_are_columns_and_filters_prune_directories(conn, oracle):
    sql = "SELECT l_linestatus, count(*) AS n, sum(l_quantity) AS q FROM {} " \
          "WHERE l_returnflag = 'R' GROUP BY l_linestatus ORDER BY 1"
    assert_same(fetch(conn, sql.format("lineitem_by_flag")),
                oracle.sql(sql.format("lineitem")).to_arrow_table(), True)
    plan = dict(zip(*fetch(conn, "EXPLAIN " + sql.format("lineitem_by_flag"))
                    .to_pydict().values()))["physical_plan"]
    assert "l_returnflag=R/" in plan, plan
    assert "l_returnflag=A/" not in plan and "l_returnflag=N/" not in plan, plan


def test_missing_bucket_and_object_are_not_found_naming_the_url(conn):
    text = expect_error(conn, "CREATE EXTERNAL TABLE gone STORED AS PARQUET "
                              "LOCATION 's3://missing-bucket/x/'", "(NotFound;")
    assert "missing-bucket" in text, text
    text = expect_error(conn, "CREATE EXTERNAL TABLE gone STORED AS PARQUET "
                              f"LOCATION 's3://{BUCKET}/sf/no-such-file.parquet'", "(NotFound;")
    assert "no-such-file.parquet" in text, text
    assert fetch(conn, "SELECT count(*) AS n FROM region").column("n").to_pylist() == [5]


def test_unreachable_endpoint_is_unavailable_within_seconds(conn):
    started = time.time()
    expect_error(conn, "CREATE EXTERNAL TABLE far STORED AS PARQUET "
                       "LOCATION 's3://unreachable/x/'", "(Unavailable;")
    assert time.time() - started < 30
    assert fetch(conn, "SELECT count(*) AS n FROM nation").column("n").to_pylist() == [25]


def test_a_wrong_key_is_permission_denied_and_never_shown(s3, tmp_path):
    secret = "not-the-secret-" + "x" * 24
    credentials = {**s3["credentials"], "AWS_SECRET_ACCESS_KEY": secret}
    log = tmp_path / "coordinator.log"
    server = Process(
        [str(BIN_DIR / "squadron-server"), "--listen", "127.0.0.1:0", "--insecure",
         "--local-workers", "1", "--data-dir", str(tmp_path / "data"),
         "--store", f"s3://{BUCKET}?endpoint={s3['endpoint']}&allow_http=true",
         "--data-root", f"s3://{BUCKET}"],
        stderr=log, env=credentials,
    )
    try:
        with flightsql.connect(server.url) as conn:
            text = expect_error(conn, "CREATE EXTERNAL TABLE t STORED AS PARQUET "
                                      f"LOCATION 's3://{BUCKET}/sf/nation/'", "(PermissionDenied;")
            assert secret not in text
            assert s3["credentials"]["AWS_SECRET_ACCESS_KEY"] not in text
            assert fetch(conn, "SELECT 1 AS one").column("one").to_pylist() == [1]
    finally:
        server.stop()
    assert secret not in log.read_text()


@pytest.mark.parametrize("fmt, code", [("DELTA", "(NotFound;"),
                                       ("ICEBERG", "(Unimplemented;"),
                                       ("NOSUCHFORMAT", "(InvalidArgument;")])
def test_table_formats_not_read_are_clear_errors(conn, formats_dir, fmt, code):
    text = expect_error(conn, f"CREATE EXTERNAL TABLE other STORED AS {fmt} "
                              f"LOCATION '{formats_dir}/'", code)
    assert fmt in text.upper(), text


def test_credentials_on_the_command_line_are_refused(tmp_path):
    result = subprocess.run(
        [str(BIN_DIR / "squadron-server"), "--listen", "127.0.0.1:0", "--insecure",
         "--data-dir", str(tmp_path), "--store", "s3://b?aws_secret_access_key=hunter2"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "credential" in result.stderr
    assert "hunter2" not in result.stderr


AZURITE = REPO / "integration" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
FAKE_GCS = REPO / "integration" / ".gcs" / "fake-gcs-server"
# Azurite's documented development account: public, and accepted only by
# the emulator.
AZURITE_CONNECTION = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
    "K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
)


def wait_for_port(port, what):
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.time() < deadline, f"{what} did not start"
            time.sleep(0.2)


def start_azurite(port, files):
    """Azurite (from npm) in memory, `files` uploaded to container `tpch`.
    Coordinator options: the emulator is found by an environment variable."""
    from azure.storage.blob import BlobServiceClient

    emulator = subprocess.Popen(
        [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--silent"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, "azurite")
    blobs = BlobServiceClient.from_connection_string(AZURITE_CONNECTION.format(port=port))
    blobs.create_container(BUCKET)
    for key, path in files.items():
        with open(path, "rb") as f:
            blobs.get_blob_client(BUCKET, key).upload_blob(f)
    options = "use_emulator=true"
    return emulator, options, {"AZURITE_BLOB_STORAGE_URL": f"http://127.0.0.1:{port}"}


def start_fake_gcs(port, files, tmp_path_factory):
    """fake-gcs-server (from the Go module proxy) in memory, loaded with
    `files` in bucket `tpch`; reads go unsigned to its base URL."""
    data = tmp_path_factory.mktemp("gcs-data")
    for key, path in files.items():
        (data / BUCKET / key).parent.mkdir(parents=True, exist_ok=True)
        (data / BUCKET / key).write_bytes(path.read_bytes())
    emulator = subprocess.Popen(
        [str(FAKE_GCS), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
         "-backend", "memory", "-data", str(data), "-public-host", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, "fake-gcs-server")
    options = f"base_url=http://127.0.0.1:{port}&skip_signature=true&allow_http=true"
    return emulator, options, {}


@pytest.fixture(scope="module", params=["az", "gs"])
def emulated_store(request, cluster, tmp_path_factory):
    """Azure Blob Storage (Azurite) or GCS (fake-gcs-server) on loopback
    holding nation and orders, and a coordinator with 2 embedded workers
    reading them as `SCHEME://tpch/…`."""
    scheme = request.param
    files = {f"sf/{t}/part-0.parquet": cluster["data"] / f"{t}.parquet"
             for t in ["nation", "orders"]}
    port = free_port()
    if scheme == "az":
        emulator, options, env = start_azurite(port, files)
    else:
        emulator, options, env = start_fake_gcs(port, files, tmp_path_factory)
    server = Process(
        [str(BIN_DIR / "squadron-server"), "--listen", "127.0.0.1:0", "--insecure",
         # Small tables: read by the workers all the same, which is what is tested.
         "--coordinator-scan-limit", "0",
         "--local-workers", "2", "--data-dir", str(tmp_path_factory.mktemp(f"{scheme}-data")),
         "--store", f"{scheme}://{BUCKET}?{options}",
         "--table", f"nation={scheme}://{BUCKET}/sf/nation/"],
        stderr=tmp_path_factory.mktemp(f"{scheme}-logs") / "coordinator.log", env=env,
    )
    yield scheme, server.url
    server.stop()
    emulator.kill()
    emulator.wait()


def test_tables_in_azure_and_gcs_answer_like_local_files(emulated_store, oracle):
    scheme, uri = emulated_store
    with flightsql.connect(uri) as conn:
        with conn.cursor() as cur:
            cur.execute(f"CREATE EXTERNAL TABLE orders STORED AS PARQUET "
                        f"LOCATION '{scheme}://{BUCKET}/sf/orders/'")
        sql = "SELECT n_name, count(*) AS orders, sum(o_totalprice) AS total " \
              "FROM orders JOIN nation ON o_custkey % 25 = n_nationkey " \
              "GROUP BY n_name ORDER BY n_name"
        assert_same(fetch(conn, sql), oracle.sql(sql).to_arrow_table(), True)
        # A missing object (fake-gcs-server answers a missing bucket with 500,
        # where GCS says 404; the S3 tests cover missing buckets).
        text = expect_error(conn, "CREATE EXTERNAL TABLE gone STORED AS PARQUET "
                                  f"LOCATION '{scheme}://{BUCKET}/sf/no-such-file.parquet'",
                            "(NotFound;")
        assert "no-such-file.parquet" in text, text
