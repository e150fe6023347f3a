"""MySQL column types → Arrow types, and the value conversions that make both read paths agree
(the Iceberg types follow from the Arrow ones: ``schema/iceberg_types.py``).

A row reaches binlake two ways: from a ``SELECT`` (pymysql's conversions) and from the binlog
(python-mysql-replication's decoding). They disagree on several types — BIT is bytes in one and a
bit string in the other, SET a string or a Python set, FLOAT a decimal rounding or the exact float32,
BINARY(n) padded or not, a zero date a string or None. Each column gets one normaliser per path, so
a row read either way is the same tuple, and a snapshot chunk corrected from the binlog is exact.

The mapping (Arrow type; the Iceberg type follows from it: int32 → int, int64 → long, float32 →
float, float64 → double, decimal → decimal, date32 → date, timestamp → timestamp, timestamp with
zone → timestamptz, string → string, binary → binary, bool → boolean):

=====================================  ===================================================
MySQL                                  Arrow
=====================================  ===================================================
TINYINT(1) / BOOL, BIT(1)              bool
TINYINT…MEDIUMINT, INT (signed)        int32
INT UNSIGNED, BIGINT                   int64
BIGINT UNSIGNED                        decimal128(20, 0)
DECIMAL(p, s), p ≤ 38                  decimal128(p, s)
DECIMAL(p, s), p > 38                  string (exact digits)
FLOAT / DOUBLE                         float32 / float64
BIT(n > 1)                             binary (big-endian, ⌈n/8⌉ bytes)
DATE                                   date32
DATETIME(0–6)                          timestamp[us] (no zone)
TIMESTAMP(0–6)                         timestamp[us, UTC]
TIME(0–6)                              int64 microseconds (MySQL TIME spans ±838 h)
YEAR                                   int32
CHAR, VARCHAR, TEXT, ENUM, SET, JSON   string (SET as MySQL shows it: ``a,b``)
BINARY, VARBINARY, BLOB                binary
GEOMETRY and its subtypes              binary (WKB, the SRID prefix removed)
=====================================  ===================================================

Zero dates (``0000-00-00``) read as null.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa

from binlake.errors import BinlakeError
from binlake.events import Column, CreateTable

Converter = Callable[[Any], Any]

_INT32_TYPES = {"tinyint", "smallint", "mediumint"}
_TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
_BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
GEOMETRY_TYPES = {
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection", "geomcollection",
}  # fmt: skip
MAX_DECIMAL_PRECISION = 38
_FLOAT32 = struct.Struct("<f")
# python-mysql-replication decodes a zero TIMESTAMP as the epoch and YEAR 0000 as 1900;
# neither is a valid stored value otherwise (TIMESTAMP starts at 1970-01-01 00:00:01, YEAR at 1901).
_EPOCH = dt.datetime(1970, 1, 1)
_NONE_EMPTY_SET = "empty set"
# python-mysql-replication's markers for a date it could not decode: a zero or partly-zero date.
_NONE_ZERO_DATE = {"out of date range", "out of datetime range", "out of datetime2 range"}
TEMPORAL_TYPES = ("date", "datetime", "timestamp")


class UnsupportedTypeError(BinlakeError):
    """A column type binlake cannot map."""


def is_bool(column: Column) -> bool:
    return column.column_type.startswith("tinyint(1)") or column.column_type == "bit(1)"


def arrow_type(column: Column) -> pa.DataType:
    """The Arrow type of a MySQL column (see the module docstring for the table)."""
    t = column.data_type
    if is_bool(column):
        return pa.bool_()
    if t in _INT32_TYPES or (t == "int" and not column.unsigned) or t == "year":
        return pa.int32()
    if t == "int" or (t == "bigint" and not column.unsigned):
        return pa.int64()
    if t == "bigint":
        return pa.decimal128(20, 0)
    if t == "decimal":
        precision, scale = column.precision or 10, column.scale or 0
        return pa.decimal128(precision, scale) if precision <= MAX_DECIMAL_PRECISION else pa.string()
    if t == "float":
        return pa.float32()
    if t in ("double", "real"):
        return pa.float64()
    if t == "bit":
        return pa.binary()
    if t == "date":
        return pa.date32()
    if t == "datetime":
        return pa.timestamp("us")
    if t == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if t == "time":
        return pa.int64()
    if t in _TEXT_TYPES:
        return pa.string()
    if t in _BINARY_TYPES or t in GEOMETRY_TYPES:
        return pa.binary()
    raise UnsupportedTypeError(
        f"Column `{column.name}` has type `{column.column_type}`, which binlake cannot map. "
        "Fix: exclude the table with `source.tables_exclude`, or change the column's type."
    )


def arrow_schema(table: CreateTable, columns: Sequence[str] | None = None) -> pa.Schema:
    """The Arrow schema of ``table`` (or of the named columns, in that order)."""
    picked = [table.column(n) for n in columns] if columns else list(table.columns)
    return pa.schema([pa.field(c.name, arrow_type(c), nullable=c.nullable) for c in picked])


# -- shared value conversions --------------------------------------------------------------------


def _float32(value: Any) -> Any:
    return None if value is None else _FLOAT32.unpack(_FLOAT32.pack(value))[0]


def _time_micros(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    return _parse_time_text(str(value))


def _parse_time_text(text: str) -> int:
    """``-838:59:59.000000`` → microseconds (pymysql hands back text it cannot convert)."""
    negative = text.startswith("-")
    hours, minutes, seconds = text.lstrip("-").split(":")
    whole, _, fraction = seconds.partition(".")
    micros = ((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 1_000_000 + int((fraction + "000000")[:6])
    return -micros if negative else micros


def _binlog_time_micros(value: Any) -> Any:
    """TIME from python-mysql-replication, corrected for negative values with a fraction.

    MySQL stores such a TIME2 value with its integer part decremented and its fraction
    complemented; the library reads both parts as they are, so -(S + f) seconds comes back as
    -(S + (1 - f)) (measured for every precision 1-6: -00:00:01.25 reads as -1.75 s).
    """
    micros = _time_micros(value)
    if micros is None or micros >= 0:
        return micros
    whole, fraction = divmod(-micros, 1_000_000)
    return -(whole * 1_000_000 + (1_000_000 - fraction)) if fraction else micros


def _decimal_text(value: Any) -> Any:
    return None if value is None else format(Decimal(value), "f")


def _unsigned_bigint(value: Any) -> Any:
    return None if value is None else Decimal(value)


def _to_bool(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return any(value)
    if isinstance(value, str):  # BIT(1) from the binlog: "1" / "0"
        return value == "1"
    return bool(value)


def _temporal_or_none(value: Any) -> Any:
    # pymysql returns zero or invalid dates as text; they are null in the sink.
    return value if isinstance(value, dt.date) else None


def _geometry(value: Any) -> Any:
    # MySQL keeps geometries as a 4-byte SRID followed by WKB.
    return None if value is None else bytes(value[4:])


def _set_text(members: Sequence[str]) -> Converter:
    order = {m.lower(): i for i, m in enumerate(members)}

    def convert(value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        return ",".join(sorted(value, key=lambda m: order.get(str(m).lower(), len(order))))

    return convert


def _json_text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8")
    # MySQL's binary JSON, decoded to Python: render as MySQL does (", " and ": ").
    return json.dumps(_plain(value), ensure_ascii=False, separators=(", ", ": "))


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8")
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _bits_to_bytes(width: int) -> Converter:
    size = (width + 7) // 8

    def convert(value: Any) -> Any:
        if value is None or isinstance(value, bytes | bytearray):
            return value
        return int(str(value), 2).to_bytes(size, "big")

    return convert


def _pad_binary(length: int) -> Converter:
    # The binlog drops BINARY(n)'s trailing zero bytes; SELECT returns all n bytes.
    def convert(value: Any) -> Any:
        return None if value is None else _binary(value).ljust(length, b"\0")

    return convert


def _binary(value: Any) -> Any:
    # python-mysql-replication "decodes" binary values in the charset `binary`, which Python does
    # not know; the lookup fails and the bytes stay, except for an empty value: b"".decode() never
    # looks the codec up and returns "" (a str).
    return value.encode() if isinstance(value, str) else value


def _utc(value: Any) -> Any:
    # TIMESTAMP values are instants: both paths read them in UTC and mark them so, which is also
    # how Arrow hands back a timestamp[us, UTC] value.
    return value.replace(tzinfo=dt.UTC) if isinstance(value, dt.datetime) and value.tzinfo is None else value


def _zero_timestamp(value: Any) -> Any:
    return None if value is None or value == _EPOCH else _utc(value)


def _zero_year(value: Any) -> Any:
    return 0 if value == 1900 else value


def _common(column: Column) -> Converter | None:
    """The conversion both read paths need for ``column``, or None."""
    t = column.data_type
    if is_bool(column):
        return _to_bool
    if t == "bigint" and column.unsigned:
        return _unsigned_bigint
    if t == "decimal" and (column.precision or 10) > MAX_DECIMAL_PRECISION:
        return _decimal_text
    if t == "float":
        return _float32
    if t == "time":
        return _time_micros
    if t in GEOMETRY_TYPES:
        return _geometry
    if t == "set":
        return _set_text(column.values)
    if t == "json":
        return _json_text
    return None


def select_converter(column: Column) -> Converter | None:
    """Normalises a value as pymysql returns it from a SELECT (None: keep it as it is)."""
    t = column.data_type
    if t == "timestamp":
        return lambda v: _utc(_temporal_or_none(v))
    if t in ("date", "datetime"):
        return _temporal_or_none
    return _common(column)


def binlog_converter(column: Column) -> Converter | None:
    """Normalises a value as python-mysql-replication decodes it (None: keep it as it is)."""
    t = column.data_type
    if t == "bit" and not is_bool(column):
        return _bits_to_bytes(column.precision or 1)
    if t == "binary" and column.length:
        return _pad_binary(column.length)
    if t in _BINARY_TYPES:
        return _binary
    if t == "timestamp":
        return _zero_timestamp
    if t == "year":
        return _zero_year
    if t == "time":
        return _binlog_time_micros
    return _common(column)


class RowConverter:
    """Turns rows of ``table`` (from either path) into normalised tuples and Arrow batches."""

    def __init__(self, table: CreateTable) -> None:
        self.table = table
        self.schema = arrow_schema(table)
        self._select = [select_converter(c) for c in table.columns]
        self._binlog = [binlog_converter(c) for c in table.columns]
        self._set_columns = {c.name for c in table.columns if c.data_type == "set"}
        self._temporal = [i for i, c in enumerate(table.columns) if c.data_type in TEMPORAL_TYPES]
        self.zero_dates = 0
        """Rows seen with a zero date (read as NULL), for the caller's ``zero_dates`` policy."""

    def select_columns(self, rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
        """SELECT rows → normalised columns (column-wise: one pass per converted column)."""
        columns = [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in self._select]
        if self._temporal:
            # pymysql hands back zero dates as text.
            self.zero_dates += sum(any(isinstance(row[i], str) for i in self._temporal) for row in rows)
        for i, convert in enumerate(self._select):
            if convert is not None:
                columns[i] = [convert(v) for v in columns[i]]
        return columns

    def binlog_row(
        self, values: dict[str, Any], none_sources: dict[str, str] | None = None
    ) -> tuple[Any, ...]:
        """A row image from the binlog → a normalised tuple in table column order."""
        row = []
        if none_sources and any(none_sources.get(self.table.columns[i].name) in _NONE_ZERO_DATE
                                for i in self._temporal):  # fmt: skip
            self.zero_dates += 1
        for column, convert in zip(self.table.columns, self._binlog, strict=True):
            value = values.get(column.name)
            if value is None and column.name in self._set_columns and none_sources:
                value = "" if none_sources.get(column.name) == _NONE_EMPTY_SET else None
            row.append(convert(value) if convert is not None else value)
        return tuple(row)

    def batch(self, columns: Sequence[Sequence[Any]]) -> pa.RecordBatch:
        """Normalised columns → an Arrow record batch of the table's schema."""
        arrays = [pa.array(col, type=field.type) for col, field in zip(columns, self.schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
