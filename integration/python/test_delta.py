"""Delta Lake tables through Flight SQL on 2 worker processes: written here
with the `deltalake` package over several versions (appends, a partition
deleted, rows deleted by rewriting files), each version's answers compared
with single-node DataFusion over what `deltalake` itself reads; scans split
across tasks; files skipped by partition values and statistics."""

import json
import re
import uuid

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from answers import assert_same
from conftest import BIN_DIR, Process, expect_error, fetch

ROWS_PER_FILE = 5000


def batch(first_id, rows, region):
    ids = pa.array(range(first_id, first_id + rows), pa.int64())
    return pa.table({
        "id": ids,
        "region": pa.array([region] * rows, pa.string()),
        "amount": pa.compute.multiply(pa.compute.cast(ids, pa.float64()), 0.5),
        "day": pa.array([(i % 365) for i in range(first_id, first_id + rows)], pa.int32())
                 .cast(pa.date32()),
        "note": pa.array([None if i % 10 == 0 else f"n{i % 97}"
                          for i in range(first_id, first_id + rows)], pa.string()),
    })


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("delta")
    # Partitioned by region, one append per id range so each file has
    # its own min/max.
    events = root / "events"
    for k, region in enumerate(["eu", "us", "asia", "eu"]):
        write_deltalake(str(events), batch(k * ROWS_PER_FILE, ROWS_PER_FILE, region),
                        partition_by=["region"], mode="append")
    # Unpartitioned, four files with disjoint id ranges.
    ranges = root / "ranges"
    for k in range(4):
        write_deltalake(str(ranges), batch(k * ROWS_PER_FILE, ROWS_PER_FILE, "eu"),
                        mode="append")
    return root


@pytest.fixture(scope="module")
def delta_cluster(tables, tmp_path_factory):
    logs = tmp_path_factory.mktemp("delta-logs")
    workers = [
        Process([str(BIN_DIR / "squadron-worker"), "--listen", "127.0.0.1:0", "--insecure"],
                stderr=logs / f"worker-{i}.log")
        for i in range(2)
    ]
    server = Process(
        [str(BIN_DIR / "squadron-server"), "--listen", "127.0.0.1:0", "--insecure",
         # Small tables: read by the workers all the same, which is what is tested.
         "--coordinator-scan-limit", "0",
         "--workers", ",".join(w.url for w in workers),
         "--data-dir", str(tmp_path_factory.mktemp("delta-data")),
         "--data-root", str(tables),
         # Told by its _delta_log, not by the JSON files in it.
         "--table", f"events={tables / 'events'}",
         "--table", f"ranges={tables / 'ranges'}:delta"],
        stderr=logs / "coordinator.log",
    )
    yield server.url
    server.stop()
    for w in workers:
        w.stop()


@pytest.fixture(scope="module")
def conn(delta_cluster):
    with flightsql.connect(delta_cluster) as conn:
        yield conn


def expected(path, sql, name):
    """The answer of single-node DataFusion over the rows `deltalake` reads."""
    import datafusion

    ctx = datafusion.SessionContext()
    ctx.register_record_batches(name, [DeltaTable(str(path)).to_pyarrow_table().to_batches()])
    return ctx.sql(sql).to_arrow_table()


QUERIES = [
    "SELECT region, count(*) AS n, sum(amount) AS total, min(day) AS first, "
    "count(note) AS notes FROM {t} GROUP BY region ORDER BY region",
    "SELECT id, region, amount, day, note FROM {t} WHERE id % 997 = 3 ORDER BY id",
    "SELECT count(*) AS n FROM {t} WHERE region = 'eu' AND id BETWEEN 100 AND 17000",
    # No filter: DataFusion may answer from the files' row counts.
    "SELECT count(*) AS n, count(region) AS regions, count(note) AS notes FROM {t}",
]


def check_version(conn, path, name):
    for sql in QUERIES:
        query = sql.format(t=name)
        assert_same(fetch(conn, query), expected(path, query, name), True)


def test_every_version_reads_like_deltalake_itself(conn, tables):
    events = tables / "events"
    table = DeltaTable(str(events))
    assert table.version() == 3
    check_version(conn, events, "events")
    # A fifth file, a whole partition deleted, then rows deleted by
    # rewriting the files that held them (remove + add actions).
    write_deltalake(str(events), batch(4 * ROWS_PER_FILE, ROWS_PER_FILE, "us"),
                    partition_by=["region"], mode="append")
    check_version(conn, events, "events")
    # Rows with no region: a null partition value.
    write_deltalake(str(events), batch(5 * ROWS_PER_FILE, 100, None),
                    partition_by=["region"], mode="append")
    check_version(conn, events, "events")
    DeltaTable(str(events)).delete("region = 'asia'")
    check_version(conn, events, "events")
    DeltaTable(str(events)).delete("id % 3 = 0")
    assert DeltaTable(str(events)).version() == 7
    check_version(conn, events, "events")
    columns = fetch(conn, "SELECT * FROM events LIMIT 1").column_names
    assert columns == ["id", "region", "amount", "day", "note"]


def scanned_files(conn, sql):
    plan = dict(zip(*fetch(conn, "EXPLAIN " + sql).to_pydict().values()))
    return set(re.findall(r"[\w=/.-]+\.parquet", plan["physical_plan"])), plan


def test_filters_skip_files_by_partition_and_statistics(conn):
    everything, _ = scanned_files(conn, "SELECT sum(amount) FROM ranges")
    assert len(everything) == 4, everything
    # Only the last file's ids reach 15000 and beyond.
    files, _ = scanned_files(conn, f"SELECT sum(amount) FROM ranges WHERE id >= {3 * ROWS_PER_FILE}")
    assert len(files) == 1, files
    assert fetch(conn, f"SELECT count(*) AS n FROM ranges WHERE id >= {3 * ROWS_PER_FILE}") \
        .column("n").to_pylist() == [ROWS_PER_FILE]
    files, _ = scanned_files(conn, "SELECT count(*) FROM events WHERE region = 'us'")
    assert files and all("region=us/" in f for f in files), files


def test_scans_are_split_across_tasks(conn):
    _, plan = scanned_files(conn, "SELECT sum(amount) FROM ranges")
    scan = re.search(r"Stage 0 tasks=(\d+)", plan["distributed_plan"])
    assert scan and int(scan.group(1)) >= 2, plan["distributed_plan"]


def test_created_external_delta_table_reads_through_flight_sql(conn, tables):
    with conn.cursor() as cur:
        cur.execute(f"CREATE EXTERNAL TABLE ranges_again STORED AS DELTA "
                    f"LOCATION '{tables / 'ranges'}'")
    query = "SELECT count(*) AS n, sum(id) AS s, count(note) AS notes FROM {}"
    assert_same(fetch(conn, query.format("ranges_again")),
                expected(tables / "ranges", query.format("ranges"), "ranges"), True)


def test_a_directory_without_a_log_is_not_found(conn, tables):
    plain = tables / "plain"
    plain.mkdir()
    pq.write_table(batch(0, 10, "eu"), plain / "part-0.parquet")
    text = expect_error(conn, f"CREATE EXTERNAL TABLE nolog STORED AS DELTA LOCATION '{plain}'",
                        "(NotFound;")
    assert "_delta_log" in text, text
    assert fetch(conn, "SELECT count(*) AS n FROM ranges").column("n").to_pylist() \
        == [4 * ROWS_PER_FILE]


def test_deletion_vectors_are_unimplemented_naming_the_table(conn, tables):
    """A table whose log (written here by hand, as Spark would) gives a
    file a deletion vector: reading the file as is would return deleted
    rows, so the scan refuses."""
    path = tables / "with_dv"
    (path / "_delta_log").mkdir(parents=True)
    data = batch(0, 10, "eu").select(["id", "amount"])
    pq.write_table(data, path / "part-0.parquet")
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
    ]}
    actions = [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                      "readerFeatures": ["deletionVectors"],
                      "writerFeatures": ["deletionVectors"]}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [],
                      "configuration": {"delta.enableDeletionVectors": "true"},
                      "createdTime": 0}},
        {"add": {"path": "part-0.parquet", "partitionValues": {},
                 "size": (path / "part-0.parquet").stat().st_size,
                 "modificationTime": 0, "dataChange": True,
                 "stats": json.dumps({"numRecords": 10}),
                 "deletionVector": {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                                    "offset": 1, "sizeInBytes": 36, "cardinality": 2}}},
    ]
    (path / "_delta_log" / "00000000000000000000.json").write_text(
        "\n".join(json.dumps(a) for a in actions) + "\n")
    with conn.cursor() as cur:
        cur.execute(f"CREATE EXTERNAL TABLE with_dv STORED AS DELTA LOCATION '{path}'")
    text = expect_error(conn, "SELECT count(*) FROM with_dv", "(Unimplemented;")
    assert "deletion vector" in text and "with_dv" in text, text
