"""Column types from `information_schema.columns.data_type`, which names
each column by its Arrow type (`Int64`, `Decimal128(15, 2)`, `Utf8View`,
`Timestamp(ns)`)."""

import re

from sqlalchemy import types as sqltypes

_PLAIN = {
    "Boolean": sqltypes.BOOLEAN,
    "Int8": sqltypes.SMALLINT,
    "Int16": sqltypes.SMALLINT,
    "Int32": sqltypes.INTEGER,
    "Int64": sqltypes.BIGINT,
    "UInt8": sqltypes.SMALLINT,
    "UInt16": sqltypes.INTEGER,
    "UInt32": sqltypes.BIGINT,
    "UInt64": sqltypes.NUMERIC,
    "Float16": sqltypes.REAL,
    "Float32": sqltypes.REAL,
    "Float64": sqltypes.DOUBLE_PRECISION,
    "Utf8": sqltypes.VARCHAR,
    "Utf8View": sqltypes.VARCHAR,
    "LargeUtf8": sqltypes.VARCHAR,
    "Binary": sqltypes.VARBINARY,
    "BinaryView": sqltypes.VARBINARY,
    "LargeBinary": sqltypes.VARBINARY,
    "Date32": sqltypes.DATE,
    "Date64": sqltypes.DATE,
    "Null": sqltypes.NullType,
}

_DECIMAL = re.compile(r"Decimal(?:32|64|128|256)\((\d+), *(-?\d+)\)")


def column_type(arrow_type: str) -> sqltypes.TypeEngine:
    """The SQLAlchemy type of a column DataFusion describes as `arrow_type`."""
    if arrow_type in _PLAIN:
        return _PLAIN[arrow_type]()
    decimal = _DECIMAL.fullmatch(arrow_type)
    if decimal:
        return sqltypes.NUMERIC(int(decimal.group(1)), int(decimal.group(2)))
    if arrow_type.startswith("Timestamp("):
        # `Timestamp(ns)` or `Timestamp(ns, "UTC")`: a zone makes it aware.
        return sqltypes.TIMESTAMP(timezone="," in arrow_type)
    if arrow_type.startswith(("Time32(", "Time64(")):
        return sqltypes.TIME()
    if arrow_type.startswith("Interval("):
        return sqltypes.Interval()
    if arrow_type.startswith("FixedSizeBinary("):
        return sqltypes.VARBINARY()
    if arrow_type.startswith("Dictionary("):
        # Dictionary(Int32, Utf8): the values' type.
        values = arrow_type[len("Dictionary(") : -1].split(",", 1)[-1].strip()
        return column_type(values)
    return sqltypes.NullType()
