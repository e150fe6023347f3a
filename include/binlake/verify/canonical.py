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

Canonical text of a value, per type (SQL rendering ↔ Python rendering of the mapped value), each
the cheapest the server computes exactly (the demo's sums 1.5× faster on the server than with
dates as text and binaries as hex: bench/RESULTS.md):

- integers, YEAR, BIGINT UNSIGNED: decimal digits; booleans (TINYINT(1), BIT(1)): ``1`` / ``0``;
- DECIMAL: digits with exactly the column's scale; FLOAT/DOUBLE: the server's shortest text of the
  double (FLOAT widened to DOUBLE: every bit counts), ``double_text``;
- BIT(n): the unsigned integer; TIME: signed microseconds;
- DATE: the server's day number (``TO_DAYS``); DATETIME and TIMESTAMP (in UTC): its
  ``TO_SECONDS`` in microseconds plus the microseconds — integers, no formatting; zero and partly
  zero dates are NULL there, as binlake reads them;
- text (CHAR … JSON, ENUM, SET): the value's UTF-8 bytes; binary strings and geometry (WKB): their
  bytes. Every one a binary string on the server: a row mixing collations would otherwise be
  converted, binary values included.

A row is one piece per column, joined by ``,``: ``N`` for NULL; a text or binary value as
``len:value`` (bytes), the length making it unambiguous whatever it holds; any other column's
rendering alone — digits and signs never hold a comma or read ``N``, nor do the members of most
ENUMs (``_bare_members``) — which spares the server computing each value twice.
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
#: TO_DAYS('1970-01-01'), and the first day both calendars count alike (``_server_count``).
_EPOCH_DAYS, _MARCH_OF_YEAR_0 = 719528, -719468
_DAY_US = 86400 * 1000000
#: Charsets whose bytes are UTF-8 as they are (``utf8`` is ``utf8mb3``: discovery's name).
_UTF8_CHARSETS = {"utf8mb4", "utf8mb3", "ascii"}
#: Charsets in which an ASCII text's bytes are its ASCII bytes (those ENUMs hold).
_ASCII_CHARSETS = _UTF8_CHARSETS | {"latin1"}
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
        return f"({c} <> 0)"
    if t == "year" or t == "bit":
        return f"({c} + 0)"
    if t == "time":
        return f"CAST(TIME_TO_SEC({c}) * 1000000 AS SIGNED)"
    if t in ("float",):
        return f"CAST(CAST({c} AS DOUBLE) AS CHAR)"
    if t in ("double", "real"):
        return f"CAST({c} AS CHAR)"
    if t == "date":
        return f"TO_DAYS({c})"  # NULL for a zero or partly zero date
    if t in ("datetime", "timestamp"):
        # A TIMESTAMP in the session's zone, UTC: no offset changes there.
        return f"(TO_SECONDS({c}) * 1000000 + MICROSECOND({c}))"
    if t in GEOMETRY_TYPES:
        return f"ST_AsBinary({c})"
    if t in _TEXT_TYPES:
        # Binary, as every text: a row of several collations would convert a binary value.
        if expression is None and _utf8_as_stored(column):
            return f"CAST({c} AS BINARY)"
        return f"CAST(CONVERT({c} USING utf8mb4) AS BINARY)"
    return c  # integers, DECIMAL (its scale's digits), binary strings: as the server prints them


def row_sql(columns: Sequence[Column], expressions: Mapping[str, str] | None = None) -> str:
    """SQL of a row's canonical text (see the module docstring); ``expressions``: SQL computing
    columns by name (a transform's projection)."""
    pieces = []
    for column in columns:
        expression = (expressions or {}).get(column.name)
        value = value_sql(column, expression)
        if _length_prefixed(column):
            # The stored value's length where its bytes are the rendering's: the server computes it
            # without copying them.
            stored = expression is None and (_utf8_as_stored(column) or _binary_string(column))
            value = f"CONCAT(OCTET_LENGTH({quote(column.name) if stored else value}), ':', {value})"
        pieces.append(f"IFNULL({value}, 'N')")
    return f"CONCAT_WS(',', {', '.join(pieces)})"


def _length_prefixed(column: Column) -> bool:
    """Whether ``column``'s canonical text may hold anything (a comma, an ``N``): text, JSON, SET,
    binary strings and geometries, an ENUM whose members do."""
    if column.data_type == "enum":
        return not _bare_members(column)
    return column.data_type in _TEXT_TYPES or column.data_type in GEOMETRY_TYPES or _binary_string(column)


def _binary_string(column: Column) -> bool:
    """BINARY, VARBINARY, the BLOBs (not BIT, not geometry: also bytes in the sink)."""
    t = column.data_type
    return arrow_type(column) == pa.binary() and t != "bit" and t not in GEOMETRY_TYPES


def _utf8_as_stored(column: Column) -> bool:
    """Whether a text column's stored bytes are its UTF-8 bytes: its charset's are, or its members
    (ENUM, SET) are ASCII in a charset that stores ASCII as ASCII."""
    ascii_members = bool(column.values) and all(m.isascii() for m in column.values)
    return column.charset in _UTF8_CHARSETS or (ascii_members and column.charset in _ASCII_CHARSETS)


def _bare_members(column: Column) -> bool:
    """Whether an ENUM's values read as their UTF-8 bytes and hold neither the separator nor the
    NULL's ``N`` (its one piece is then unambiguous without a length)."""
    return (
        bool(column.values)
        and _utf8_as_stored(column)
        and all(m.isascii() and "," not in m and m != "N" for m in column.values)
    )


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


def _server_count(values: pa.Array, day: int) -> pa.Array:
    """The server's count (``TO_DAYS``, ``TO_SECONDS``…) of ``values`` since 1970 in units of which
    ``day`` make a day: its calendar has no 29 February in year 0, Arrow's (proleptic Gregorian)
    has, so a value before March of year 0 is one day later there."""
    values = pc.cast(values, pa.int64())
    earlier = pc.cast(pc.less(values, _MARCH_OF_YEAR_0 * day), pa.int64())
    return pc.cast(pc.add(pc.add(values, _EPOCH_DAYS * day), pc.multiply(earlier, day)), pa.string())


def _days(values: pa.Array) -> pa.Array:
    return _server_count(pc.cast(values, pa.int32()), 1)


def _microseconds(values: pa.Array) -> pa.Array:
    """``TO_SECONDS(v) * 1000000 + MICROSECOND(v)`` of a timestamp (a zoned one in UTC)."""
    return _server_count(pc.cast(values.cast(pa.timestamp("us", values.type.tz)), pa.int64()), _DAY_US)


def _same(values: pa.Array) -> pa.Array:
    return values


def value_renderer(column: Column) -> Callable[[pa.Array], pa.Array]:
    """Renders Arrow values of ``column`` (as ``schema.type_mapping`` maps it) canonically."""
    t, mapped = column.data_type, arrow_type(column)
    if pa.types.is_boolean(mapped):
        return _booleans
    if t == "bit":
        return _python(lambda v: str(int.from_bytes(v, "big")))
    if pa.types.is_integer(mapped):
        return _cast
    if pa.types.is_date(mapped):
        return _days
    if pa.types.is_decimal(mapped) and mapped.scale <= _ARROW_FIXED_SCALE:
        return _cast  # Arrow prints these in fixed notation, the scale's digits included
    if pa.types.is_decimal(mapped) or t == "decimal":
        return _python(lambda v: v if isinstance(v, str) else format(v, "f"))
    if pa.types.is_floating(mapped):
        return _python(lambda v: double_text(float(v)))
    if pa.types.is_timestamp(mapped):
        return _microseconds
    return _same  # text and binary strings: their bytes


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
