"""A column's value in a rows event's data, read straight into the value ``RowConverter`` would
have produced from python-mysql-replication's (same types, same zero-date and SET rules): one small
reader (and a skipper, for lean images) per column, chosen once per table map (``column_codec``).
"""

from __future__ import annotations

import codecs
import datetime as dt
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from pymysql.charset import charset_by_name
from pymysqlreplication.constants import FIELD_TYPE

from binlake.events import Column
from binlake.schema.type_mapping import MAX_DECIMAL_PRECISION, is_bool
from binlake.source.binlog import mysql_json

#: (value, position after it) from (buffer, position).
Reader = Callable[[bytes, int], tuple[Any, int]]
#: Position after a value, without decoding it.
Skipper = Callable[[bytes, int], int]

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_FIXED = {
    FIELD_TYPE.TINY: ("<b", "<B"),
    FIELD_TYPE.SHORT: ("<h", "<H"),
    FIELD_TYPE.LONG: ("<i", "<I"),
    FIELD_TYPE.LONGLONG: ("<q", "<Q"),
    FIELD_TYPE.FLOAT: ("<f", "<f"),
    FIELD_TYPE.DOUBLE: ("<d", "<d"),
}


class ZeroDates:
    """Counts row images with a zero date (read as NULL), for ``RowConverter.zero_dates``."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = False


def _fsp_bytes(fsp: int) -> int:
    return (fsp + 1) // 2


def _fraction(buf: bytes, pos: int, size: int) -> int:
    """Microseconds of a DATETIME2/TIMESTAMP2 fraction stored in ``size`` bytes."""
    if size == 0:
        return 0
    value = int.from_bytes(buf[pos : pos + size], "big")
    return value * (10_000 if size == 1 else 100 if size == 2 else 1)


def _fixed(fmt: str, convert: Callable[[Any], Any] | None) -> tuple[Reader, int]:
    unpack = struct.Struct(fmt).unpack_from
    size = struct.calcsize(fmt)
    if convert is None:

        def read(buf: bytes, pos: int) -> tuple[Any, int]:
            return unpack(buf, pos)[0], pos + size
    else:

        def read(buf: bytes, pos: int) -> tuple[Any, int]:
            return convert(unpack(buf, pos)[0]), pos + size

    return read, size


def _int24(unsigned: bool) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        return int.from_bytes(buf[pos : pos + 3], "little", signed=not unsigned), pos + 3

    return read


def _length_prefixed(length_size: int, decode: Callable[[bytes], Any] | None) -> tuple[Reader, Skipper]:
    def skip(buf: bytes, pos: int) -> int:
        return pos + length_size + int.from_bytes(buf[pos : pos + length_size], "little")

    if length_size == 1:

        def read(buf: bytes, pos: int) -> tuple[Any, int]:
            end = pos + 1 + buf[pos]
            raw = buf[pos + 1 : end]
            return (decode(raw) if decode is not None else raw), end
    else:

        def read(buf: bytes, pos: int) -> tuple[Any, int]:
            start = pos + length_size
            end = start + int.from_bytes(buf[pos:start], "little")
            raw = buf[start:end]
            return (decode(raw) if decode is not None else raw), end

    return read, skip


def text_encoding(column: Column, wire: Any) -> str | None:
    """The Python codec of a column's bytes (None: a binary column, keep bytes).

    The table map's charset (``binlog_row_metadata=FULL``) is the one the row was written in, so
    it wins over the schema in hand; the charset ``binary`` has no codec and keeps bytes.
    """
    name = getattr(wire, "character_set_name", None)
    if name is None:
        if not column.is_text and column.data_type != "json":  # MariaDB's JSON is a LONGTEXT
            return None
        name = column.charset or "utf8mb4"
    charset = charset_by_name(name)
    encoding = charset.encoding if charset is not None else name
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        return None


def _text_decoder(column: Column, wire: Any) -> Callable[[bytes], Any] | None:
    """bytes → str in the column's character set (None: a binary column, keep bytes)."""
    encoding = text_encoding(column, wire)
    return None if encoding is None else lambda raw: raw.decode(encoding)


def decimal_groups(precision: int, scale: int) -> list[tuple[int, int]]:
    """(bytes, digits) of MySQL's binary DECIMAL groups, most significant first: big-endian groups
    of 9 digits in 4 bytes, shorter at both ends."""
    whole = precision - scale
    groups = [(_DIG2BYTES[whole % 9], whole % 9)] + [(4, 9)] * (whole // 9)
    groups += [(4, 9)] * (scale // 9) + [(_DIG2BYTES[scale % 9], scale % 9)]
    return [(size, digits) for size, digits in groups if size]


def _decimal(precision: int, scale: int, as_text: bool) -> tuple[Reader, int]:
    """MySQL's binary DECIMAL (``decimal_groups``), sign in the top bit, negatives stored inverted.
    Decoded as one integer, split by shifts."""
    parts = [(8 * size, digits) for size, digits in decimal_groups(precision, scale)]  # (bits, digits)
    size = sum(bits for bits, _ in parts) // 8
    top = 1 << (8 * size - 1)
    rest = (1 << (8 * size)) - 1 ^ top
    steps, shift = [], 8 * size
    for bits, digits in parts:
        shift -= bits
        steps.append((shift, (1 << bits) - 1, 10**digits))
    suffix = f"E-{scale}"

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        raw = int.from_bytes(buf[pos : pos + size], "big")
        negative = not raw & top
        raw ^= rest if negative else top
        unscaled = 0
        for at, mask, base in steps:
            unscaled = unscaled * base + (raw >> at & mask)
        value = Decimal(f"-{unscaled}{suffix}" if negative else f"{unscaled}{suffix}")
        return (format(value, "f") if as_text else value), pos + size

    return read, size


def _date(zero: ZeroDates) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        value = int.from_bytes(buf[pos : pos + 3], "little")
        day, month, year = value & 31, (value >> 5) & 15, value >> 9
        try:
            return dt.date(year, month, day), pos + 3
        except ValueError:  # zero or partly zero date
            zero.seen = True
            return None, pos + 3

    return read


def _datetime2(fsp: int, zero: ZeroDates) -> tuple[Reader, int]:
    frac = _fsp_bytes(fsp)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        packed = int.from_bytes(buf[pos : pos + 5], "big") - 0x8000000000
        ymd, hms = packed >> 17, packed & 0x1FFFF
        year_month = ymd >> 5
        try:
            value = dt.datetime(
                year_month // 13, year_month % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63,
                _fraction(buf, pos + 5, frac),
            )  # fmt: skip
        except ValueError:  # zero or partly zero date
            zero.seen = True
            value = None
        return value, pos + 5 + frac

    return read, 5 + frac


def _timestamp2(fsp: int) -> tuple[Reader, int]:
    frac = _fsp_bytes(fsp)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        seconds = int.from_bytes(buf[pos : pos + 4], "big")
        if seconds == 0:  # the zero TIMESTAMP
            return None, pos + 4 + frac
        value = dt.datetime.fromtimestamp(seconds, _UTC)
        micros = _fraction(buf, pos + 4, frac)
        return (value.replace(microsecond=micros) if micros else value), pos + 4 + frac

    return read, 4 + frac


def _time2(fsp: int) -> tuple[Reader, int]:
    """TIME2 → signed microseconds (MySQL's TIME_from_longlong_time_packed)."""
    frac = _fsp_bytes(fsp)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        if frac == 3:
            packed = int.from_bytes(buf[pos : pos + 6], "big") - 0x800000000000
        else:
            whole = int.from_bytes(buf[pos : pos + 3], "big") - 0x800000
            part = int.from_bytes(buf[pos + 3 : pos + 3 + frac], "big") if frac else 0
            if whole < 0 and part:
                whole += 1
                part -= 1 << (8 * frac)
            packed = (whole << 24) + part * (10_000 if frac == 1 else 100)
        negative = packed < 0
        packed = -packed if negative else packed
        hms, micros = packed >> 24, packed % (1 << 24)
        hours, minutes, seconds = (hms >> 12) % (1 << 10), (hms >> 6) % 64, hms % 64
        value = ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros
        return (-value if negative else value), pos + 3 + frac

    return read, 3 + frac


def _enum(members: Sequence[str], size: int) -> Reader:
    values = ("", *members)  # index 0 is the empty string MySQL stores for an invalid value

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        index = int.from_bytes(buf[pos : pos + size], "little")
        return (values[index] if index < len(values) else ""), pos + size

    return read


def _set(members: Sequence[str], size: int) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        mask = int.from_bytes(buf[pos : pos + size], "little")
        return ",".join(m for i, m in enumerate(members) if mask >> i & 1), pos + size

    return read


def _bit(size: int, as_bool: bool) -> Reader:
    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        raw = buf[pos : pos + size]
        return (any(raw) if as_bool else raw), pos + size

    return read


def _pad(read: Reader, length: int) -> Reader:
    # The binlog drops BINARY(n)'s trailing zero bytes; SELECT returns all n bytes.
    def padded(buf: bytes, pos: int) -> tuple[Any, int]:
        value, end = read(buf, pos)
        return value.ljust(length, b"\0"), end

    return padded


def _map(read: Reader, convert: Callable[[Any], Any]) -> Reader:
    def mapped(buf: bytes, pos: int) -> tuple[Any, int]:
        value, end = read(buf, pos)
        return convert(value), end

    return mapped


def _skip_fixed(size: int) -> Skipper:
    return lambda buf, pos: pos + size


def column_codec(column: Column, wire: Any, zero: ZeroDates) -> tuple[Reader, Skipper] | None:
    """Reader and skipper of one column (``wire``: the table map's column), or None if unsupported."""
    t = wire.type
    if t in _FIXED:
        signed, unsigned = _FIXED[t]
        convert: Callable[[Any], Any] | None = None
        if is_bool(column):
            convert = bool
        elif column.data_type == "bigint" and column.unsigned:
            convert = Decimal
        read, size = _fixed(unsigned if column.unsigned else signed, convert)
        return read, _skip_fixed(size)
    if t == FIELD_TYPE.INT24:
        return _int24(column.unsigned), _skip_fixed(3)
    if t == FIELD_TYPE.YEAR:
        return (lambda buf, pos: ((buf[pos] + 1900) if buf[pos] else 0, pos + 1)), _skip_fixed(1)
    if t == FIELD_TYPE.NEWDECIMAL:
        read, size = _decimal(wire.precision, wire.decimals, wire.precision > MAX_DECIMAL_PRECISION)
        return read, _skip_fixed(size)
    if t == FIELD_TYPE.DATE:
        return _date(zero), _skip_fixed(3)
    if t == FIELD_TYPE.DATETIME2:
        read, size = _datetime2(wire.fsp, zero)
        return read, _skip_fixed(size)
    if t == FIELD_TYPE.TIMESTAMP2:
        read, size = _timestamp2(wire.fsp)
        return read, _skip_fixed(size)
    if t == FIELD_TYPE.TIME2:
        read, size = _time2(wire.fsp)
        return read, _skip_fixed(size)
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.VAR_STRING):
        read, skip = _length_prefixed(2 if wire.max_length > 255 else 1, _text_decoder(column, wire))
        if column.data_type == "binary" and column.length:
            read = _pad(read, column.length)
        return read, skip
    if t == FIELD_TYPE.BLOB:
        return _length_prefixed(wire.length_size, _text_decoder(column, wire))
    if t == FIELD_TYPE.GEOMETRY:
        read, skip = _length_prefixed(wire.length_size, None)
        return _map(read, lambda value: bytes(value[4:])), skip  # SRID prefix off: plain WKB
    if t == FIELD_TYPE.ENUM:
        return _enum(column.values, wire.size), _skip_fixed(wire.size)
    if t == FIELD_TYPE.SET:
        return _set(column.values, wire.size), _skip_fixed(wire.size)
    if t == FIELD_TYPE.BIT:
        return _bit(wire.bytes, is_bool(column)), _skip_fixed(wire.bytes)
    if t == FIELD_TYPE.JSON:  # MySQL's binary JSON, as the server renders it (``mysql_json``)
        read, skip = _length_prefixed(wire.length_size, None)
        return _map(read, lambda raw: mysql_json.render(mysql_json.parse(bytes(raw)))), skip
    return None  # pre-5.6 DATETIME/TIMESTAMP/TIME: the library decodes these
