"""MySQL's binary JSON, rendered as the text MySQL itself renders, and its partial updates applied.

MySQL keeps JSON columns in a binary format (MariaDB keeps text: nothing here applies to it). The
snapshot reads a JSON column as the server renders it (``CAST(j AS CHAR)``); the stream must write
the very same text for the same value, so this module renders the binary format the way MySQL's
``Json_wrapper::to_string`` does (sql-common/json_dom.cc):

- objects ``{"k": v, "k2": v2}`` with keys in MySQL's order (shorter first, then byte order: the
  order the binary format stores them in), arrays ``[a, b]``;
- strings quoted with ``"``, ``\\``, ``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t`` escaped and other
  control characters as ``\\u00xx``; everything else as UTF-8;
- doubles by ``my_gcvt`` (shortest round-trip digits, ``1e20``, ``0.1``, ``1.5e-16``) with ``.0``
  added when the text would read as an integer; integers as they are;
- opaque scalars: DECIMAL as its digits with its scale (``9.99``, ``1.50``), DATE as
  ``"2024-01-02"``, DATETIME/TIMESTAMP as ``"2024-01-02 03:04:05.000000"``, TIME as
  ``"10:20:30.000000"``, other types as ``"base64:typeNN:…"``.

Partial updates (``binlog_row_value_options=PARTIAL_JSON``) carry diffs — replace, insert or
remove at a JSON path — which ``apply_diffs`` applies to the document of the before image.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from binlake.errors import BinlakeError

_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY = 0x0, 0x1, 0x2, 0x3
_LITERAL, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64 = 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xA
_DOUBLE, _STRING, _OPAQUE = 0xB, 0xC, 0xF
_LITERALS = {0x0: None, 0x1: True, 0x2: False}

# MySQL field types of opaque JSON scalars.
_TIMESTAMP, _DATE, _TIME, _DATETIME, _NEWDECIMAL, _VAR_STRING = 7, 10, 11, 12, 246, 253

_DIFF_REPLACE, _DIFF_INSERT, _DIFF_REMOVE = 0, 1, 2


class JsonDecodeError(BinlakeError):
    """A binary JSON value or diff binlake cannot read."""


@dataclass(frozen=True)
class Double:
    """A JSON double (kept apart from integers: MySQL renders ``1.0``, not ``1``)."""

    value: float


@dataclass(frozen=True)
class Opaque:
    """A JSON scalar of another MySQL type (DECIMAL, temporal types, binary strings)."""

    field_type: int
    data: bytes


@dataclass(frozen=True)
class Number:
    """A number read from MySQL's JSON text: written back exactly as it was (``1.50``, ``1e20``)."""

    text: str


# -- binary → document -----------------------------------------------------------------------


def parse(data: bytes) -> Any:
    """A binary JSON document (type byte and value) as a document of Python values:
    ``dict`` (keys in stored order), ``list``, ``str``, ``int``, ``Double``, ``Opaque``, ``True``,
    ``False``, ``None``. An empty value is JSON ``null`` (what MySQL reads it as)."""
    if not data:
        return None
    try:
        return _value(data[0], data, 1)
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise JsonDecodeError(f"a binary JSON value could not be read: {e}") from None


def _value(kind: int, data: bytes, pos: int) -> Any:
    if kind in (_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY):
        return _container(kind, data, pos)
    if kind == _LITERAL:
        return _LITERALS[data[pos]]
    if kind in _FIXED:
        fmt, wrap = _FIXED[kind]
        value = struct.unpack_from(fmt, data, pos)[0]
        return Double(value) if wrap else value
    if kind == _STRING:
        length, pos = _variable_length(data, pos)
        return data[pos : pos + length].decode("utf-8")
    if kind == _OPAQUE:
        field_type = data[pos]
        length, pos = _variable_length(data, pos + 1)
        return Opaque(field_type, bytes(data[pos : pos + length]))
    raise JsonDecodeError(f"binary JSON type {kind:#x} is unknown")


_FIXED = {
    _INT16: ("<h", False),
    _UINT16: ("<H", False),
    _INT32: ("<i", False),
    _UINT32: ("<I", False),
    _INT64: ("<q", False),
    _UINT64: ("<Q", False),
    _DOUBLE: ("<d", True),
}


def _variable_length(data: bytes, pos: int) -> tuple[int, int]:
    """A length stored 7 bits per byte, low bits first (a set high bit: more bytes follow)."""
    length, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length, pos
        shift += 7


def _container(kind: int, data: bytes, start: int) -> Any:
    large = kind in (_LARGE_OBJECT, _LARGE_ARRAY)
    obj = kind in (_SMALL_OBJECT, _LARGE_OBJECT)
    offset = 4 if large else 2
    fmt = "<I" if large else "<H"
    count = struct.unpack_from(fmt, data, start)[0]
    entries = start + 2 * offset
    keys: list[str] = []
    if obj:
        for i in range(count):
            at = entries + i * (offset + 2)
            key_offset = struct.unpack_from(fmt, data, at)[0]
            key_length = struct.unpack_from("<H", data, at + offset)[0]
            keys.append(data[start + key_offset : start + key_offset + key_length].decode("utf-8"))
        entries += count * (offset + 2)
    values = []
    for i in range(count):
        at = entries + i * (1 + offset)
        value_kind = data[at]
        if _inline(value_kind, large):
            values.append(_value(value_kind, data, at + 1))
        else:
            values.append(_value(value_kind, data, start + struct.unpack_from(fmt, data, at + 1)[0]))
    return dict(zip(keys, values, strict=True)) if obj else values


def _inline(kind: int, large: bool) -> bool:
    """Values stored in the entry itself: literals and 16-bit integers, and 32-bit ones in large
    containers."""
    return kind in (_LITERAL, _INT16, _UINT16) or (large and kind in (_INT32, _UINT32))


def parse_text(text: str) -> Any:
    """A document from the JSON text MySQL rendered (its numbers kept as they were written, so
    rendering it again gives the same text)."""
    return json.loads(text, parse_float=Number, parse_int=Number, parse_constant=Number)


# -- document → MySQL's text ------------------------------------------------------------------


def render(value: Any) -> str:
    """A document as MySQL renders it (see the module docstring)."""
    parts: list[str] = []
    _render(value, parts)
    return "".join(parts)


def _render(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, str):
        out.append(quote(value))
    elif isinstance(value, Double):
        out.append(double_text(value.value))
    elif isinstance(value, Number):
        out.append(value.text)
    elif isinstance(value, dict):
        out.append("{")
        for i, key in enumerate(sorted(value, key=_key_order)):
            if i:
                out.append(", ")
            out.append(quote(key))
            out.append(": ")
            _render(value[key], out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(", ")
            _render(item, out)
        out.append("]")
    elif isinstance(value, Opaque):
        out.append(_opaque_text(value))
    else:
        raise JsonDecodeError(f"no JSON text for a {type(value).__name__}")


def _key_order(key: str) -> tuple[int, bytes]:
    """MySQL's order of object keys: shorter first, then by their UTF-8 bytes."""
    raw = key.encode("utf-8")
    return len(raw), raw


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(text: str) -> str:
    """A string as MySQL quotes it in JSON text."""
    if not any(c in _ESCAPES or c < " " for c in text):
        return f'"{text}"'
    escaped = "".join(_ESCAPES.get(c) or (f"\\u00{ord(c):02x}" if c < " " else c) for c in text)
    return f'"{escaped}"'


#: ``my_gcvt``'s field width for doubles in JSON (DBL_DIG + 4 + max(5, DBL_DIG)), and the
#: decimal exponent beyond which it prefers scientific notation (DBL_DIG).
_WIDTH = 34
_MAX_DECPT_FOR_F = 15


def double_text(value: float) -> str:
    """A double as MySQL writes it in JSON text: ``my_gcvt`` with the shortest round-trip digits,
    and ``.0`` appended when that reads like an integer."""
    text = _gcvt(value)
    return text if "." in text or "e" in text else text + ".0"


def _gcvt(value: float) -> str:
    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)  # finite: JSON holds no NaN or infinity
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    exponent += len("".join(map(str, digit_tuple))) - len(digits)
    length = len(digits)
    decpt = length + exponent  # value = 0.<digits> × 10^decpt
    width = _WIDTH - (1 if sign else 0)
    exp_len = 1 + (decpt >= 101 or decpt <= -99) + (decpt >= 11 or decpt <= -9)
    fixed_len = length - decpt + 2 if decpt <= 0 else length + 1 if decpt < length else decpt
    have_space = fixed_len <= width
    force_e = decpt <= 0 and width <= 2 - decpt and width >= 3 + exp_len
    fits_fixed = have_space or (
        decpt <= width and (decpt >= -1 or (decpt == -2 and (length > 1 or not force_e))) and not force_e
    )
    # Scientific notation even where fixed would fit: |x| < 1e-15, or integers above 1e15.
    near = decpt >= -_MAX_DECPT_FOR_F + 1 and (decpt <= _MAX_DECPT_FOR_F or length > decpt)
    fixed = fits_fixed and (not have_space or near)
    minus = "-" if sign else ""
    if fixed:
        if decpt <= 0:
            return f"{minus}0.{'0' * -decpt}{digits}"
        if decpt < length:
            return f"{minus}{digits[:decpt]}.{digits[decpt:]}"
        return f"{minus}{digits}{'0' * (decpt - length)}"
    mantissa = digits[0] + ("." + digits[1:] if length > 1 else "")
    return f"{minus}{mantissa}e{decpt - 1}"


def _opaque_text(value: Opaque) -> str:
    kind, data = value.field_type, value.data
    if kind == _NEWDECIMAL:
        return _decimal_text(data)
    if kind in (_DATE, _DATETIME, _TIMESTAMP, _TIME):
        return quote(_temporal_text(kind, struct.unpack_from("<q", data)[0]))
    if kind == _VAR_STRING:
        return quote(data.decode("utf-8"))
    encoded = base64.b64encode(data).decode("ascii")
    # MySQL's base64 breaks lines every 76 characters.
    lines = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    return quote(f"base64:type{kind}:{lines}")


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal_text(data: bytes) -> str:
    """MySQL's binary DECIMAL (precision, scale, then the packed digits) as its digits."""
    precision, scale = data[0], data[1]
    raw = bytearray(data[2:])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    integral, fraction = precision - scale, scale
    pos = 0
    parts = []
    head = integral % 9
    if head:
        size = _DIG2BYTES[head]
        parts.append(f"{int.from_bytes(raw[pos : pos + size], 'big'):0{head}d}")
        pos += size
    for _ in range(integral // 9):
        parts.append(f"{int.from_bytes(raw[pos : pos + 4], 'big'):09d}")
        pos += 4
    digits = "".join(parts).lstrip("0") or "0"
    fractions = []
    for _ in range(fraction // 9):
        fractions.append(f"{int.from_bytes(raw[pos : pos + 4], 'big'):09d}")
        pos += 4
    tail = fraction % 9
    if tail:
        size = _DIG2BYTES[tail]
        fractions.append(f"{int.from_bytes(raw[pos : pos + size], 'big'):0{tail}d}")
    text = digits + ("." + "".join(fractions) if scale else "")
    return ("-" if negative else "") + text


def _temporal_text(kind: int, packed: int) -> str:
    """A packed MySQL temporal value as ``my_TIME_to_str`` writes it with 6 decimals."""
    negative = packed < 0
    packed = -packed if negative else packed
    fraction = packed % (1 << 24)
    whole = packed >> 24
    if kind == _TIME:
        hour, minute, second = (whole >> 12) % (1 << 10), (whole >> 6) % (1 << 6), whole % (1 << 6)
        return f"{'-' if negative else ''}{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"
    ymd, hms = whole >> 17, whole % (1 << 17)
    day, year_month = ymd % (1 << 5), ymd >> 5
    year, month = divmod(year_month, 13)
    if kind == _DATE:
        return f"{year:04d}-{month:02d}-{day:02d}"
    hour, minute, second = hms >> 12, (hms >> 6) % (1 << 6), hms % (1 << 6)
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


# -- partial updates ----------------------------------------------------------------------------


def apply_diffs(document: Any, diffs: bytes) -> Any:
    """``document`` after the diffs of a partial update (MySQL's ``Json_diff_vector``: a 4-byte
    length, then per diff an operation, a path and, but for a removal, a binary JSON value)."""
    length = struct.unpack_from("<I", diffs, 0)[0]
    pos, end = 4, 4 + length
    while pos < end:
        operation = diffs[pos]
        path_length, pos = _packed(diffs, pos + 1)
        path = parse_path(diffs[pos : pos + path_length].decode("utf-8"))
        pos += path_length
        value: Any = None
        if operation != _DIFF_REMOVE:
            value_length, pos = _packed(diffs, pos)
            value = parse(diffs[pos : pos + value_length])
            pos += value_length
        document = _apply(document, operation, path, value)
    return document


def _packed(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(data[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


PathLeg = str | int


def parse_path(text: str) -> list[PathLeg]:
    """A simple JSON path (``$.a."b c"[2]``): member names and array indexes."""
    if not text.startswith("$"):
        raise JsonDecodeError(f"`{text}` is not a JSON path")
    legs: list[PathLeg] = []
    pos = 1
    while pos < len(text):
        if text[pos] == ".":
            pos += 1
            if text[pos] == '"':
                end = pos + 1
                while text[end] != '"':
                    end += 2 if text[end] == "\\" else 1
                legs.append(text[pos + 1 : end].replace('\\"', '"').replace("\\\\", "\\"))
                pos = end + 1
            else:
                end = pos
                while end < len(text) and text[end] not in ".[":
                    end += 1
                legs.append(text[pos:end])
                pos = end
        elif text[pos] == "[":
            end = text.index("]", pos)
            legs.append(int(text[pos + 1 : end].strip()))
            pos = end + 1
        else:
            raise JsonDecodeError(f"`{text}` is not a simple JSON path (at `{text[pos:]}`)")
    return legs


def _apply(document: Any, operation: int, path: list[PathLeg], value: Any) -> Any:
    if not path:
        if operation == _DIFF_REPLACE:
            return value
        raise JsonDecodeError("a partial JSON update inserts or removes the whole document")
    parent = document
    for leg in path[:-1]:
        parent = parent[leg]
    last = path[-1]
    if operation == _DIFF_REPLACE:
        parent[last] = value
    elif operation == _DIFF_INSERT:
        if isinstance(parent, list):
            assert isinstance(last, int)
            parent.insert(min(last, len(parent)), value)
        else:
            parent[last] = value
    elif operation == _DIFF_REMOVE:
        del parent[last]
    else:
        raise JsonDecodeError(f"partial JSON update operation {operation} is unknown")
    return document
