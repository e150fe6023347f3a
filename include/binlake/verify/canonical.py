"""One rendering of a row that the source server and binlake compute alike, and its checksum.

A chunk's checksum is its row count and the sum (mod 2^64) of a 64-bit hash per row of the row's
canonical text (``Hashing``): its CRC-32 and CRC-32C side by side where the server computes them
(MariaDB 10.8+, ``server_hashing``), else the first 8 bytes of its MD5. The server's MD5 and its
conversion to a number cost as much as building the text (2.1 s of one core per 1M rows of the demo,
the CRCs 1.4 s: bench/RESULTS.md); a random difference goes unseen with odds 2^-64 either way, and
the CRCs (linear codes) let two rows that changed in the same bytes at the same places cancel with
odds about 2^-32 — a CRC-32 catches every change of up to 32 adjacent bits outright. Sums, not XOR,
so two equal rows of a table without a primary key do not cancel out. The source computes it in
SQL, over the rows as the server holds them; the sink computes it from Arrow values (the sink's
rows, and binlog images rolled forward), so a type mapping that loses anything (a DECIMAL's scale,
a FLOAT's bits, a TIMESTAMP's zone, a BIT's width, a collation's bytes) gives another checksum.

Canonical text of a value, per type (SQL rendering ↔ Python rendering of the mapped value):

- integers, YEAR, BIGINT UNSIGNED: decimal digits; booleans (TINYINT(1), BIT(1)): ``1`` / ``0``;
- DECIMAL: digits with exactly the column's scale; FLOAT/DOUBLE: the server's shortest text of the
  double (FLOAT widened to DOUBLE: every bit counts), ``double_text``;
- BIT(n): the unsigned integer; DATE ``YYYY-MM-DD``; DATETIME/TIMESTAMP (in UTC)
  ``YYYY-MM-DD HH:MM:SS.ffffff``; zero dates are NULL (as binlake reads them); TIME: signed
  microseconds;
- text (CHAR … JSON, ENUM, SET): the value's UTF-8 bytes; binary and geometry (WKB): upper-case hex.

A row is one piece per column, joined by ``,``: ``N`` for NULL; a text column's value as
``len:value`` (bytes), the length making it unambiguous whatever the text holds; any other
column's rendering alone — digits, signs, dates, hex never hold a comma or read ``N`` — which
spares the server computing each value twice (a third of the checksum's cost on the demo's orders).
"""

from __future__ import annotations

import decimal
import functools
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import duckdb
import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from binlake.events import Column, quote
from binlake.schema.type_mapping import GEOMETRY_TYPES, arrow_type, is_bool

Hashing = Literal["md5", "crc"]
"""How a row's canonical text becomes its hash: the first 8 bytes of its MD5, or its CRC-32 and
CRC-32C (the module docstring)."""
#: The session variable holding a row's text between its two CRCs.
_ROW = "@binlake_row"
_DATETIME = "%Y-%m-%d %H:%i:%s.%f"
_INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "bigint", "year", "time"}
_TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
MASK = (1 << 64) - 1
#: Arrow prints a decimal in scientific notation only below 1e-6 (like Java's BigDecimal): with
#: at most 6 digits of scale it never does.
_ARROW_FIXED_SCALE = 6


def value_sql(column: Column, expression: str | None = None) -> str:
    """SQL rendering one value of ``column`` canonically (NULL stays NULL); ``expression``: the
    SQL that computes it (a transform's computed column), default the column itself."""
    c, t = f"({expression})" if expression else quote(column.name), column.data_type
    if is_bool(column):
        return f"IF({c} IS NULL, NULL, IF({c} + 0 <> 0, '1', '0'))"
    if t == "year" or t == "bit":
        return f"CAST({c} + 0 AS CHAR)"
    if t == "time":
        return f"CAST(TIME_TO_SEC({c}) * 1000000 AS SIGNED)"
    if t in ("float",):
        return f"CAST(CAST({c} AS DOUBLE) AS CHAR)"
    if t == "date":
        return f"IF(MONTH({c}) = 0 OR DAY({c}) = 0, NULL, CAST({c} AS CHAR))"
    if t in ("datetime", "timestamp"):
        return f"IF(MONTH({c}) = 0 OR DAY({c}) = 0, NULL, DATE_FORMAT({c}, '{_DATETIME}'))"
    if t in GEOMETRY_TYPES:
        return f"HEX(ST_AsBinary({c}))"
    if t in _TEXT_TYPES:
        return c
    if arrow_type(column) == pa.binary():
        return f"HEX({c})"
    return f"CAST({c} AS CHAR)"


def row_sql(columns: Sequence[Column], expressions: Mapping[str, str] | None = None) -> str:
    """SQL of a row's canonical text (see the module docstring); ``expressions``: SQL computing
    columns by name (a transform's projection)."""
    pieces = []
    for column in columns:
        value = value_sql(column, (expressions or {}).get(column.name))
        if _length_prefixed(column):
            value = f"CONVERT({value} USING utf8mb4)"
            value = f"CONCAT(OCTET_LENGTH({value}), ':', {value})"
        pieces.append(f"IFNULL({value}, 'N')")
    return f"CONCAT_WS(',', {', '.join(pieces)})"


def _length_prefixed(column: Column) -> bool:
    """Whether ``column``'s canonical text may hold anything (a comma): text, JSON, ENUM, SET."""
    return column.data_type in _TEXT_TYPES


def checksum_sql(
    columns: Sequence[Column], expressions: Mapping[str, str] | None = None, hashing: Hashing = "md5"
) -> str:
    """``COUNT(*), SUM(hash)`` of the rows a query selects (SUM is exact: a DECIMAL)."""
    return f"COUNT(*), SUM({_hash_sql(row_sql(columns, expressions), hashing)})"


def _hash_sql(text: str, hashing: Hashing) -> str:
    if hashing == "crc":
        # The text is built once, kept in a session variable for the second CRC (the server reads
        # the operands of ``|`` left to right: ``server_hashing`` checks it).
        return f"((CRC32({_ROW} := {text}) << 32) | CRC32C({_ROW}))"
    return f"CAST(CONV(LEFT(MD5({text}), 16), 16, 10) AS UNSIGNED)"


def server_hashing(conn: pymysql.Connection[Any]) -> Hashing:
    """``crc`` where the server computes each row's CRC-32 and CRC-32C as ``row_hashes`` does
    (checked on two rows: the second CRC must read the row's own text), else ``md5``."""
    probe = [b"binlake", b"3:row,N"]
    rows = " UNION ALL ".join(f"SELECT '{t.decode()}' AS t" for t in probe)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT SUM({_hash_sql('t', 'crc')}) FROM ({rows}) AS probe")
            (found,) = cur.fetchone()
    except pymysql.Error:  # MySQL has no CRC32C, MariaDB before 10.8 neither
        return "md5"
    expected = int(crc_pairs(pa.array(probe, pa.binary())).sum(dtype=np.uint64))
    return "crc" if found is not None and int(found) & MASK == expected else "md5"


def double_text(value: float) -> str:
    """A double as MariaDB and MySQL print it (``my_gcvt``): the shortest round-trip digits, in
    fixed notation when the decimal point falls inside them, or up to 14 zeros after ``0.``, or up
    to 15 integer digits; else ``d.ddde±x`` without a plus sign (checked against the server over
    the whole range)."""
    if value == 0:
        return "0"
    number = decimal.Decimal(repr(value)).normalize()
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite: MySQL stores no NaN or infinity
    length = len(digits)
    point = exponent + length  # digits before the decimal point (negative: zeros after "0.")
    if -14 <= point <= 0 or 0 < point < length or length <= point <= 15:
        return format(number, "f")
    text = "".join(map(str, digits))
    mantissa = text[0] + ("." + text[1:] if length > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{point - 1}"


def _python(render: Callable[[Any], str]) -> Callable[[pa.Array], pa.Array]:
    def apply(values: pa.Array) -> pa.Array:
        return pa.array([None if v is None else render(v) for v in values.to_pylist()], pa.string())

    return apply


def _booleans(values: pa.Array) -> pa.Array:
    return pc.if_else(values, "1", "0")


def _cast(values: pa.Array) -> pa.Array:
    return pc.cast(values, pa.string())


def _timestamps(values: pa.Array) -> pa.Array:
    # Arrow's cast prints microsecond units with their 6 digits, as the server's ``%f``, 30× faster
    # than ``strftime``; a zoned value (in UTC) is cast as its wall time, without the zone's ``Z``.
    wall = values.cast(pa.timestamp(values.type.unit)) if values.type.tz is not None else values
    return pc.cast(wall, pa.string())


def _same(values: pa.Array) -> pa.Array:
    return values


def value_renderer(column: Column) -> Callable[[pa.Array], pa.Array]:
    """Renders Arrow values of ``column`` (as ``schema.type_mapping`` maps it) canonically."""
    t, mapped = column.data_type, arrow_type(column)
    if pa.types.is_boolean(mapped):
        return _booleans
    if t == "bit":
        return _python(lambda v: str(int.from_bytes(v, "big")))
    if pa.types.is_integer(mapped) or pa.types.is_date(mapped):
        return _cast
    if pa.types.is_decimal(mapped) and mapped.scale <= _ARROW_FIXED_SCALE:
        return _cast  # Arrow prints these in fixed notation, the scale's digits included
    if pa.types.is_decimal(mapped) or t == "decimal":
        return _python(lambda v: v if isinstance(v, str) else format(v, "f"))
    if pa.types.is_floating(mapped):
        return _python(lambda v: double_text(float(v)))
    if pa.types.is_timestamp(mapped):
        return _timestamps
    if pa.types.is_binary(mapped):
        return _python(lambda v: v.hex().upper())
    return _same


def row_texts(rows: pa.Table, columns: Sequence[Column]) -> pa.Array:
    """Each row's canonical text (as ``row_sql`` renders it on the server)."""
    pieces = []
    for column in columns:
        values = rows.column(column.name).combine_chunks().cast(arrow_type(column))
        text = pc.cast(value_renderer(column)(values), pa.binary())
        if _length_prefixed(column):
            length = pc.cast(pc.cast(pc.binary_length(text), pa.string()), pa.binary())
            text = pc.binary_join_element_wise(length, text, b":")
        pieces.append(pc.fill_null(text, b"N"))
    if not pieces:
        return pa.array([b""] * rows.num_rows, pa.binary())
    joined = pc.binary_join_element_wise(*pieces, b",")
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def row_hashes(
    rows: pa.Table, columns: Sequence[Column], hashing: Hashing = "md5"
) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """The 64-bit hash of each row's canonical text (``hashing``: as the server computes it)."""
    texts = row_texts(rows, columns)
    return crc_pairs(texts) if hashing == "crc" else md5_prefixes(texts)


def crc_pairs(texts: pa.Array) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """Each text's CRC-32 (the high 32 bits) and CRC-32C (the low ones), as the server's
    ``CRC32(t) << 32 | CRC32C(t)``."""
    values = texts.to_pylist()
    high = np.fromiter(map(zlib.crc32, values), np.uint64, len(values))
    low = np.fromiter(map(google_crc32c.value, values), np.uint64, len(values))
    return np.asarray((high << np.uint64(32)) | low, np.uint64)


@functools.cache
def _duckdb() -> duckdb.DuckDBPyConnection:
    """The process's DuckDB, one DuckDB thread (a column is hashed by one; more only cost their
    start). Opened once: opening costs 30 ms, as much as hashing 30k rows, and the verification
    hashes in a fresh thread per table."""
    return duckdb.connect(config={"threads": 1})


def md5_prefixes(texts: pa.Array) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """The first 8 bytes of each text's MD5, as a big-endian number (what the server's
    ``CONV(LEFT(MD5(…), 16), 16, 10)`` computes)."""
    # DuckDB hashes the whole column in C, without the GIL (Python's hashlib takes a call and the
    # GIL per row: 1.5× the time, and the verification's other threads wait). Its
    # ``md5_number_upper`` reads those 8 bytes little-endian, hence the byte swap.
    with _duckdb().cursor() as con:  # a cursor per call: threads must not share a connection
        hashed = con.from_arrow(pa.table({"t": texts})).select("md5_number_upper(t) AS h").fetchnumpy()
    return np.asarray(hashed["h"], dtype=np.uint64).byteswap()
