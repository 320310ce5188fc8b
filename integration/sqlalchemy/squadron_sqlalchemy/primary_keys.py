"""Primary keys through Flight SQL's CommandGetPrimaryKeys. ADBC's
`get_objects` leaves a table's constraints empty (its Flight SQL driver
does not ask for them), so the dialect asks the server itself, with
pyarrow.flight over a connection of its own."""

from dataclasses import dataclass, field
from typing import List, Optional

import pyarrow.flight as flight

_COMMAND = "type.googleapis.com/arrow.flight.protocol.sql.CommandGetPrimaryKeys"


@dataclass
class Endpoint:
    """Where and as whom to ask: what the dialect's connection uses."""

    location: str
    username: Optional[str] = None
    password: Optional[str] = None
    tls_root_certs: Optional[bytes] = None
    headers: List = field(default_factory=list)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _command(catalog: Optional[str], schema: Optional[str], table: str) -> bytes:
    """CommandGetPrimaryKeys {catalog = 1, db_schema = 2, table = 3} in an Any."""
    payload = b""
    if catalog is not None:
        payload += _bytes_field(1, catalog.encode())
    if schema is not None:
        payload += _bytes_field(2, schema.encode())
    payload += _bytes_field(3, table.encode())
    return _bytes_field(1, _COMMAND.encode()) + _bytes_field(2, payload)


def primary_key(endpoint: Endpoint, catalog, schema, table):
    """The key's name (or None) and its columns in key order; no columns
    when the table declares no key."""
    client = flight.FlightClient(endpoint.location, tls_root_certs=endpoint.tls_root_certs)
    try:
        headers = list(endpoint.headers)
        if endpoint.username is not None:
            headers.append(client.authenticate_basic_token(endpoint.username, endpoint.password or ""))
        options = flight.FlightCallOptions(headers=headers)
        descriptor = flight.FlightDescriptor.for_command(_command(catalog, schema, table))
        info = client.get_flight_info(descriptor, options)
        rows = []
        for point in info.endpoints:
            rows += client.do_get(point.ticket, options).read_all().to_pylist()
    finally:
        client.close()
    rows.sort(key=lambda row: row["key_sequence"])
    name = rows[0]["key_name"] if rows else None
    return name, [row["column_name"] for row in rows]
