"""Raw pyarrow.flight speaking Flight SQL by hand: GetFlightInfo with a
CommandStatementQuery, then DoGet of each endpoint."""

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from answers import assert_same, is_ordered
from conftest import tpch_query


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def statement_query(sql):
    """google.protobuf.Any wrapping a Flight SQL CommandStatementQuery."""
    command = _field(1, sql.encode())
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return _field(1, type_url) + _field(2, command)


@pytest.fixture(scope="module")
def client(cluster):
    c = flight.FlightClient(cluster["uri"])
    yield c
    c.close()


def run(client, sql):
    info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_query(sql)))
    tables = [client.do_get(ep.ticket).read_all() for ep in info.endpoints]
    assert len(tables) == 1
    return info, tables[0]


@pytest.mark.parametrize("n", range(1, 23))
def test_tpch_matches_single_node(client, oracle, n):
    sql = tpch_query(n)
    info, actual = run(client, sql)
    expected = oracle.sql(sql).to_arrow_table()
    assert info.schema.names == actual.schema.names
    assert_same(actual, expected, is_ordered(sql))


def test_ticket_is_redeemed_once(client):
    info = client.get_flight_info(
        flight.FlightDescriptor.for_command(statement_query("SELECT 1 AS one"))
    )
    ticket = info.endpoints[0].ticket
    assert client.do_get(ticket).read_all().column("one").to_pylist() == [1]
    # NOT_FOUND surfaces in pyarrow as ArrowKeyError.
    with pytest.raises(KeyError, match="unknown statement handle"):
        client.do_get(ticket).read_all()


def test_garbage_ticket_is_rejected(client):
    # INVALID_ARGUMENT surfaces in pyarrow as ArrowInvalid.
    with pytest.raises(pa.ArrowInvalid):
        client.do_get(flight.Ticket(b"\x00garbage\xff")).read_all()
    # A well-formed ticket for a statement that was never issued.
    forged = _field(1, b"type.googleapis.com/arrow.flight.protocol.sql.TicketStatementQuery")
    forged += _field(2, _field(1, b"00000000-0000-0000-0000-000000000000"))
    with pytest.raises(KeyError, match="unknown statement handle"):
        client.do_get(flight.Ticket(forged)).read_all()
    _, table = run(client, "SELECT 2 AS two")
    assert table.column("two").to_pylist() == [2]
