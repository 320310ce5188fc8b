"""The Flight SQL surface beyond statement queries: metadata commands,
prepared statements with bound parameters, catalog queries. Answers are
checked against single-node DataFusion over the same files (`oracle`)."""

import datetime
import decimal

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from answers import assert_same

TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]


@pytest.fixture(scope="module")
def conn(cluster):
    with flightsql.connect(cluster["uri"]) as conn:
        yield conn


def test_get_info_names_the_server(conn):
    info = conn.adbc_get_info()
    assert info["vendor_name"] == "Squadron"
    assert info["vendor_version"]
    # The Arrow implementation's real version (arrow-rs), not a placeholder.
    major = int(info["vendor_arrow_version"].split(".")[0])
    assert major >= 50, info["vendor_arrow_version"]


def test_get_objects_lists_catalog_schema_tables_and_columns(conn, oracle):
    objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    catalogs = {c["catalog_name"]: c for c in objects}
    assert "datafusion" in catalogs
    schemas = {s["db_schema_name"]: s for s in catalogs["datafusion"]["catalog_db_schemas"]}
    tables = {t["table_name"]: t for t in schemas["public"]["db_schema_tables"]}
    assert sorted(tables) == TABLES
    columns = [c["column_name"] for c in tables["nation"]["table_columns"]]
    expected = [f.name for f in oracle.table("nation").schema()]
    assert columns == expected


def test_get_objects_filters_by_pattern(conn):
    objects = conn.adbc_get_objects(depth="tables", table_name_filter="%item").read_all()
    names = [
        t["table_name"]
        for c in objects.to_pylist()
        for s in c["catalog_db_schemas"] or []
        for t in s["db_schema_tables"] or []
    ]
    assert names == ["lineitem"]


def test_table_schema_and_types(conn, oracle):
    schema = conn.adbc_get_table_schema("orders")
    expected = oracle.table("orders").schema()
    assert schema.names == expected.names
    # Strings reach clients as plain strings, whatever the files hold.
    assert schema.field("o_comment").type == pa.string()
    assert set(conn.adbc_get_table_types()) >= {"TABLE", "VIEW"}


def test_bound_parameters_match_literals(conn, oracle):
    with conn.cursor() as cur:
        for key in [3, 17]:
            cur.execute("SELECT n_name, n_regionkey FROM nation WHERE n_nationkey = ?", parameters=(key,))
            actual = cur.fetch_arrow_table()
            expected = oracle.sql(
                f"SELECT n_name, n_regionkey FROM nation WHERE n_nationkey = {key}"
            ).to_arrow_table()
            assert_same(actual, expected, ordered=False)
        cur.execute(
            "SELECT count(*) AS n FROM orders WHERE o_orderpriority = $1 AND o_totalprice > $2",
            parameters=("1-URGENT", 100000.0),
        )
        actual = cur.fetch_arrow_table()
        expected = oracle.sql(
            "SELECT count(*) AS n FROM orders "
            "WHERE o_orderpriority = '1-URGENT' AND o_totalprice > 100000.0"
        ).to_arrow_table()
        assert_same(actual, expected, ordered=False)


def test_timestamp_parameters_keep_microseconds_and_result_columns_are_described(conn):
    # Timestamps are declared in milliseconds (what the JDBC driver writes);
    # a value bound in microseconds is still compared exactly.
    at = datetime.datetime(2024, 5, 1, 12, 0, 0, 123456)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT ? = TIMESTAMP '2024-05-01 12:00:00.123456' AS same, "
            "? = TIMESTAMP '2024-05-01 12:00:00.123' AS truncated",
            parameters=(at, at),
        )
        assert cur.fetchall() == [(True, False)]
        cur.execute("SELECT l_extendedprice, l_extendedprice * 2 AS twice FROM lineitem LIMIT 1")
        schema = cur.fetch_arrow_table().schema
    price, twice = (schema.field(i).metadata for i in range(2))
    assert price[b"ARROW:FLIGHT:SQL:TYPE_NAME"] == b"DECIMAL"
    assert (price[b"ARROW:FLIGHT:SQL:PRECISION"], price[b"ARROW:FLIGHT:SQL:SCALE"]) == (b"15", b"2")
    assert price[b"ARROW:FLIGHT:SQL:TABLE_NAME"] == b"lineitem"
    assert b"ARROW:FLIGHT:SQL:TABLE_NAME" not in twice
    assert twice[b"ARROW:FLIGHT:SQL:SCALE"] == b"2"


# A parameter of each Arrow type ADBC binds from Python, and a literal of
# the same value: the statement compares them, and returns the value.
PARAMETER_CASES = [
    (pa.array([7], pa.int8()), "CAST(7 AS TINYINT)"),
    (pa.array([7], pa.int16()), "CAST(7 AS SMALLINT)"),
    (pa.array([7], pa.int32()), "CAST(7 AS INT)"),
    (pa.array([-(2**63)], pa.int64()), "CAST(-9223372036854775808 AS BIGINT)"),
    (pa.array([7], pa.uint32()), "arrow_cast(7, 'UInt32')"),
    (pa.array([1.5], pa.float32()), "CAST(1.5 AS REAL)"),
    (pa.array([2.25], pa.float64()), "CAST(2.25 AS DOUBLE)"),
    (pa.array([decimal.Decimal("123.45")], pa.decimal128(15, 2)), "CAST(123.45 AS DECIMAL(15,2))"),
    (pa.array(["naïve ☃"], pa.string()), "'naïve ☃'"),
    (pa.array(["x"], pa.large_string()), "'x'"),
    (pa.array([b"\x00\xff"], pa.binary()), "X'00FF'"),
    (pa.array([True], pa.bool_()), "true"),
    (pa.array([datetime.date(1995, 3, 15)], pa.date32()), "DATE '1995-03-15'"),
    (
        pa.array([datetime.datetime(2024, 5, 1, 12, 0, 0, 123456)], pa.timestamp("us")),
        "TIMESTAMP '2024-05-01 12:00:00.123456'",
    ),
    (
        pa.array(
            [datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.timezone.utc)],
            pa.timestamp("us", "UTC"),
        ),
        "TIMESTAMP '2024-05-01 12:00:00Z'",
    ),
    (pa.array([datetime.time(12, 34, 56, 789000)], pa.time64("us")), "TIME '12:34:56.789'"),
]


@pytest.mark.parametrize("value,literal", PARAMETER_CASES, ids=lambda c: str(getattr(c, "type", "")))
def test_parameters_of_every_type_match_their_literal(conn, value, literal):
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT $1 = {literal} AS same, $1 AS v",
            parameters=pa.record_batch([value], names=["$1"]),
        )
        got = cur.fetch_arrow_table()
    assert got.column("same").to_pylist() == [True]
    # In the type the statement gives the parameter (the literal's).
    assert got.column("v").to_pylist() == value.cast(got.column("v").type).to_pylist()


def test_current_user_without_authentication_is_anonymous(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT current_user, session_user")
        assert cur.fetchall() == [("anonymous", "anonymous")]


def test_every_bound_row_runs_once(conn, oracle):
    params = pa.record_batch([pa.array([1, 2, 24], pa.int64())], names=["$1"])
    with conn.cursor() as cur:
        cur.adbc_prepare("SELECT n_name FROM nation WHERE n_nationkey = $1")
        cur.execute("SELECT n_name FROM nation WHERE n_nationkey = $1", parameters=params)
        actual = cur.fetch_arrow_table()
    expected = oracle.sql(
        "SELECT n_name FROM nation WHERE n_nationkey IN (1, 2, 24)"
    ).to_arrow_table()
    assert_same(actual, expected, ordered=False)


def test_execute_schema_without_running(conn):
    with conn.cursor() as cur:
        schema = cur.adbc_execute_schema("SELECT o_orderkey, o_comment FROM orders WHERE o_orderkey = ?")
    assert schema.names == ["o_orderkey", "o_comment"]
    assert schema.field("o_comment").type == pa.string()


def test_unbound_parameters_are_a_clear_error(conn):
    with conn.cursor() as cur:
        with pytest.raises(flightsql.Error) as err:
            cur.execute("SELECT n_name FROM nation WHERE n_nationkey = $1")
        assert "INVALID_ARGUMENT" in str(err.value), str(err.value)
        cur.execute("SELECT 1 AS one")
        assert cur.fetch_arrow_table().column("one").to_pylist() == [1]


def test_show_tables_and_information_schema(conn):
    with conn.cursor() as cur:
        cur.execute("SHOW TABLES")
        table = cur.fetch_arrow_table()
        names = {
            r["table_name"] for r in table.to_pylist() if r["table_schema"] == "public"
        }
        assert names == set(TABLES)
        cur.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'region' ORDER BY ordinal_position"
        )
        columns = cur.fetch_arrow_table().column("column_name").to_pylist()
        assert columns == ["r_regionkey", "r_name", "r_comment"]
        cur.execute("SHOW COLUMNS FROM nation")
        assert cur.fetch_arrow_table().num_rows == 4


def test_views_are_listed_with_their_definition(conn, oracle):
    definition = "CREATE VIEW bi_views.asia AS SELECT n_name FROM nation WHERE n_regionkey = 2"
    with conn.cursor() as cur:
        cur.execute("CREATE SCHEMA IF NOT EXISTS bi_views")
        cur.execute(definition)
        try:
            cur.execute("SELECT n_name FROM bi_views.asia")
            expected = oracle.sql("SELECT n_name FROM nation WHERE n_regionkey = 2")
            assert_same(cur.fetch_arrow_table(), expected.to_arrow_table(), ordered=False)
            objects = conn.adbc_get_objects(
                depth="tables", db_schema_filter="bi_views", table_types_filter=["VIEW"]
            ).read_all().to_pylist()
            listed = [
                (schema["db_schema_name"], table["table_name"], table["table_type"])
                for catalog in objects
                for schema in catalog["catalog_db_schemas"] or []
                for table in schema["db_schema_tables"] or []
            ]
            assert listed == [("bi_views", "asia", "VIEW")]
            cur.execute(
                "SELECT definition FROM information_schema.views "
                "WHERE table_schema = 'bi_views' AND table_name = 'asia'"
            )
            assert cur.fetchall() == [(definition,)]
            # A second view of the name is refused as such, not as a failure.
            with pytest.raises(flightsql.DatabaseError, match="ALREADY_EXISTS"):
                cur.execute(definition)
        finally:
            cur.execute("DROP VIEW bi_views.asia")


def _command(name, payload=b""):
    type_url = f"type.googleapis.com/arrow.flight.protocol.sql.{name}".encode()
    return b"\x0a" + bytes([len(type_url)]) + type_url + b"\x12" + _varint(len(payload)) + payload


def test_type_info_and_key_commands_with_raw_pyarrow(cluster):
    client = flight.connect(cluster["uri"])
    info = client.get_flight_info(flight.FlightDescriptor.for_command(_command("CommandGetXdbcTypeInfo")))
    types = client.do_get(info.endpoints[0].ticket).read_all()
    assert {"BIGINT", "VARCHAR", "DATE", "DECIMAL"} <= set(types.column("type_name").to_pylist())

    # CommandGetPrimaryKeys{table: "nation"}: field 3, a string.
    keys = _command("CommandGetPrimaryKeys", b"\x1a\x06nation")
    info = client.get_flight_info(flight.FlightDescriptor.for_command(keys))
    result = client.do_get(info.endpoints[0].ticket).read_all()
    assert result.num_rows == 0
    assert result.schema.names == [
        "catalog_name", "db_schema_name", "table_name", "column_name", "key_name", "key_sequence",
    ]


def test_unknown_prepared_handles_are_not_found(cluster):
    client = flight.connect(cluster["uri"])
    # CommandPreparedStatementQuery{prepared_statement_handle: "forged"}
    forged = _command("CommandPreparedStatementQuery", b"\x0a\x06forged")
    # pyarrow raises NOT_FOUND as a KeyError.
    with pytest.raises(KeyError, match="unknown prepared statement handle"):
        client.get_flight_info(flight.FlightDescriptor.for_command(forged))
    # ActionClosePreparedStatement with a handle never issued.
    close = flight.Action(
        "ClosePreparedStatement",
        _command("ActionClosePreparedStatementRequest", b"\x0a\x06forged"),
    )
    with pytest.raises(KeyError):
        list(client.do_action(close))
    # The server is still healthy.
    info = client.get_flight_info(flight.FlightDescriptor.for_command(_command("CommandGetTableTypes")))
    assert client.do_get(info.endpoints[0].ticket).read_all().num_rows == 3


def _varint(n):
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


READ_TICKET = """
import sys
import pyarrow.flight as flight
client = flight.connect(sys.argv[1])
try:
    client.do_get(flight.Ticket(bytes.fromhex(sys.argv[2]))).read_all()
    print("finished")
except BaseException as e:
    print(type(e).__name__, e)
"""


def test_cancel_flight_info_stops_a_running_query(cluster):
    import subprocess
    import sys
    import time

    client = flight.connect(cluster["uri"])
    # 10^11 generated rows on the workers: runs for minutes unless stopped.
    # (A query whose operator computes for seconds inside one poll, such as
    # a large nested-loop join, only stops at its next yield.)
    sql = "SELECT count(*) FROM generate_series(1, 100000000000) WHERE value % 7 = 3"
    query = b"\x0a" + _varint(len(sql)) + sql.encode()
    info = client.get_flight_info(
        flight.FlightDescriptor.for_command(_command("CommandStatementQuery", query))
    )
    # The reader runs in its own process: pyarrow reports a CANCELLED gRPC
    # status as KeyboardInterrupt (it takes it for its own interruption).
    reader = subprocess.Popen(
        [sys.executable, "-c", READ_TICKET, cluster["uri"], info.endpoints[0].ticket.ticket.hex()],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    body = info.serialize()
    request = b"\x0a" + _varint(len(body)) + body
    results = list(client.do_action(flight.Action("CancelFlightInfo", request)))
    # CancelFlightInfoResult{status: CANCEL_STATUS_CANCELLED (1)}
    assert results[0].body.to_pybytes() == b"\x08\x01"
    output, _ = reader.communicate(timeout=30)
    assert output.startswith("KeyboardInterrupt") or "cancelled" in output.lower(), output
    # Cancelling again: nothing is running any more.
    again = list(client.do_action(flight.Action("CancelFlightInfo", request)))
    assert again[0].body.to_pybytes() == b"\x08\x03"
    # The cluster still answers.
    with flightsql.connect(cluster["uri"]) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) AS n FROM region")
        assert cur.fetch_arrow_table().column("n").to_pylist() == [5]


def _fields(message):
    """The length-delimited fields of a protobuf message: {number: bytes}."""
    fields, at = {}, 0
    while at < len(message):
        key, at = _read_varint(message, at)
        if key & 7 != 2:
            raise ValueError(f"unexpected wire type in {message!r}")
        size, at = _read_varint(message, at)
        fields[key >> 3] = message[at:at + size]
        at += size
    return fields


def _read_varint(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def test_parameters_bound_as_a_dense_union_keep_their_values(cluster):
    # flightsql-dbapi (the SQLAlchemy and Superset adapter) binds every
    # parameter as a dense union of the types it may hold; a float bound
    # for a DECIMAL placeholder used to become NULL and match nothing.
    client = flight.connect(cluster["uri"])
    sql = b"SELECT count(*) AS n FROM lineitem WHERE l_discount < ?"
    request = _command("ActionCreatePreparedStatementRequest", b"\x0a" + _varint(len(sql)) + sql)
    [result] = list(client.do_action(flight.Action("CreatePreparedStatement", request)))
    handle = _fields(_fields(result.body.to_pybytes())[2])[1]
    union = pa.UnionArray.from_dense(
        pa.array([1], pa.int8()),
        pa.array([0], pa.int32()),
        [pa.array([], pa.int64()), pa.array([0.03]), pa.array([], pa.string())],
        ["int64", "float64", "string"],
    )
    descriptor = flight.FlightDescriptor.for_command(
        _command("CommandPreparedStatementQuery", b"\x0a" + _varint(len(handle)) + handle)
    )
    parameters = pa.record_batch([union], names=["0"])
    writer, reader = client.do_put(descriptor, parameters.schema)
    writer.write_batch(parameters)
    writer.done_writing()
    reader.read()
    writer.close()
    info = client.get_flight_info(descriptor)
    got = client.do_get(info.endpoints[0].ticket).read_all().column("n").to_pylist()
    with flightsql.connect(cluster["uri"]) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) AS n FROM lineitem WHERE l_discount < 0.03")
        expected = cur.fetch_arrow_table().column("n").to_pylist()
    assert expected[0] > 0 and got == expected
