"""MySQL's binary JSON: the text binlake writes equals the text MySQL's own ``CAST(j AS CHAR)`` gives.

There is no MySQL server here (MariaDB keeps JSON as text), so documents are built from the
documented binary format (sql-common/json_binary.h) and the expected texts are MySQL's rendering
rules (sql-common/json_dom.cc ``wrapper_to_string``, strings/dtoa.cc ``my_gcvt``): keys shortest
first, ``", "`` and ``": "``, doubles in their shortest form with ``.0`` for integral ones, opaque
DECIMAL/DATE/DATETIME/TIME as the server prints them.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from binlake.source.binlog import mysql_json
from binlake.source.binlog.mysql_json import (
    Double,
    Opaque,
    apply_diffs,
    double_text,
    parse,
    parse_text,
    render,
)

LITERAL, INT16, INT64, UINT64, DOUBLE, STRING, OPAQUE = 0x4, 0x5, 0x9, 0xA, 0xB, 0xC, 0xF
SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0x0, 0x1, 0x2, 0x3


def _varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _scalar(value: Any) -> tuple[int, bytes]:
    if value is None or value is True or value is False:
        return LITERAL, bytes([{None: 0, True: 1, False: 2}[value]])
    if isinstance(value, int):
        if -(2**15) <= value < 2**15:
            return INT16, struct.pack("<h", value)
        if value >= 2**63:
            return UINT64, struct.pack("<Q", value)
        return INT64, struct.pack("<q", value)
    if isinstance(value, float):
        return DOUBLE, struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode()
        return STRING, _varlen(len(raw)) + raw
    if isinstance(value, Opaque):
        return OPAQUE, bytes([value.field_type]) + _varlen(len(value.data)) + value.data
    return _container(value, large=False)


def _container(value: Any, large: bool) -> tuple[int, bytes]:
    """A container as MySQL stores it: header, key entries, value entries, keys, values."""
    is_object = isinstance(value, dict)
    items = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode())) if is_object else None
    values = [v for _, v in items] if items is not None else list(value)
    offset = 4 if large else 2
    fmt = "<I" if large else "<H"
    header = 2 * offset + len(values) * (1 + offset) + (len(values) * (offset + 2) if is_object else 0)
    keys = [k.encode() for k, _ in items] if items is not None else []
    body = bytearray()
    key_entries = bytearray()
    at = header
    for key in keys:
        key_entries += struct.pack(fmt, at) + struct.pack("<H", len(key))
        body += key
        at += len(key)
    value_entries = bytearray()
    for v in values:
        kind, payload = _scalar(v)
        if kind in (LITERAL, INT16):
            value_entries += bytes([kind]) + payload.ljust(offset, b"\0")
        else:
            value_entries += bytes([kind]) + struct.pack(fmt, at)
            body += payload
            at += len(payload)
    size = header + len(body)
    data = struct.pack(fmt, len(values)) + struct.pack(fmt, size) + key_entries + value_entries + body
    kind = (LARGE_OBJECT if large else SMALL_OBJECT) if is_object else (LARGE_ARRAY if large else SMALL_ARRAY)
    return kind, bytes(data)


def encode(value: Any, large: bool = False) -> bytes:
    kind, payload = _container(value, large) if large else _scalar(value)
    return bytes([kind]) + payload


def _decimal(precision: int, scale: int, unscaled: int) -> Opaque:
    """MySQL's binary DECIMAL (decimal2bin) for small values: ``precision - scale`` ≤ 9 and
    ``scale`` ≤ 9 digits, each part in ⌈digits/2⌉ bytes (dig2bytes), negatives inverted."""
    sizes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    whole, fraction = divmod(abs(unscaled), 10**scale)
    raw = whole.to_bytes(sizes[precision - scale], "big") + fraction.to_bytes(sizes[scale], "big")
    raw = bytes([raw[0] ^ 0x80]) + raw[1:]
    if unscaled < 0:
        raw = bytes(b ^ 0xFF for b in raw)
    return Opaque(246, bytes([precision, scale]) + raw)


def _packed_datetime(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, us: int = 0) -> int:
    ymd = ((y * 13 + mo) << 5) | d
    hms = (h << 12) | (mi << 6) | s
    return (((ymd << 17) | hms) << 24) + us


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # what python's json gives differently: `1e+20`, `0.0`-less integral doubles, key order
        ({"p": _decimal(3, 2, 999)}, '{"p": 9.99}'),  # JSON_OBJECT('p', 9.99): the crash
        ([_decimal(3, 2, -150), _decimal(5, 0, 12345)], "[-1.50, 12345]"),
        ([1e20, 0.1, 1.0, 100.0, -2.5, -0.0], "[1e20, 0.1, 1.0, 100.0, -2.5, -0.0]"),
        (
            [1e15, 123456789012345.0, 1e-15, 1e-16, 1.5e-7],
            "[1e15, 123456789012345.0, 0.000000000000001, 1e-16, 0.00000015]",
        ),
        ([5e-324, 1.7976931348623157e308], "[5e-324, 1.7976931348623157e308]"),
        ({"bb": 1, "a": 2, "c": [True, False, None]}, '{"a": 2, "c": [true, false, null], "bb": 1}'),
        ({"é": 1, "z": 2}, '{"z": 2, "é": 1}'),  # keys by length in UTF-8 bytes, then bytes
        (['tab\tq"b\\s\u0001', "ü 🎉"], '["tab\\tq\\"b\\\\s\\u0001", "ü 🎉"]'),
        ([2**63 + 5, -(2**62)], f"[{2**63 + 5}, {-(2**62)}]"),
        ([Opaque(10, struct.pack("<q", _packed_datetime(2024, 1, 2)))], '["2024-01-02"]'),
        (
            [Opaque(12, struct.pack("<q", _packed_datetime(2024, 1, 2, 3, 4, 5, 6)))],
            '["2024-01-02 03:04:05.000006"]',
        ),
        ([Opaque(11, struct.pack("<q", -(((838 << 12) | (59 << 6) | 59) << 24)))], '["-838:59:59.000000"]'),
        ([Opaque(252, b"\x00\x01\xff")], '["base64:type252:AAH/"]'),
        ("top-level string", '"top-level string"'),
        (None, "null"),
        ({}, "{}"),
        ([], "[]"),
    ],
)
def test_binary_json_renders_as_mysql_does(value: Any, text: str) -> None:
    assert render(parse(encode(value))) == text


def test_large_containers_and_nesting() -> None:
    document = {"list": [*range(300), 2**40], "nested": {"deep": [{"x": "y" * 5000}]}}
    rendered = render(parse(encode(document, large=True)))
    assert rendered == (
        '{"list": ['
        + ", ".join(map(str, [*range(300), 2**40]))
        + '], "nested": {"deep": [{"x": "'
        + "y" * 5000
        + '"}]}}'
    )


def test_an_empty_value_is_null() -> None:
    assert render(parse(b"")) == "null"


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "0.0"), (1.0, "1.0"), (3.0e-5, "0.00003"), (-1e100, "-1e100"), (2.5e21, "2.5e21"), (0.5, "0.5")],
)
def test_doubles_as_my_gcvt_writes_them(value: float, text: str) -> None:
    assert double_text(value) == text


def _diff(operation: int, path: str, value: Any = None) -> bytes:
    raw_path = path.encode()
    out = bytes([operation]) + bytes([len(raw_path)]) + raw_path
    if operation != 2:
        data = encode(value)
        out += bytes([len(data)]) + data
    return out


def test_partial_updates_apply_their_diffs_in_order() -> None:
    before = render(parse(encode({"a": 1, "b": [1, 2], "c": {"d": "x"}})))
    diffs = [
        _diff(0, "$.a", 2.5),  # REPLACE (JSON_SET/JSON_REPLACE of an existing value)
        _diff(1, "$.b[1]", "ins"),  # INSERT into an array (JSON_ARRAY_INSERT)
        _diff(1, '$."new key"', None),  # INSERT a member (JSON_SET of a new key)
        _diff(2, "$.c.d"),  # REMOVE
    ]
    vector = b"".join(diffs)
    after = apply_diffs(parse_text(before), struct.pack("<I", len(vector)) + vector)
    assert render(after) == '{"a": 2.5, "b": [1, "ins", 2], "c": {}, "new key": null}'


def test_numbers_read_from_text_render_back_unchanged() -> None:
    text = '{"d": 1.50, "e": 1e20, "n": -0.0, "z": 123456789012345678901234567890}'
    assert render(parse_text(text)) == text


def test_an_unknown_binary_type_is_a_clear_error() -> None:
    with pytest.raises(mysql_json.JsonDecodeError, match="type 0xd is unknown"):
        parse(bytes([0xD, 0]))


def test_double_wrapper_keeps_floats_apart_from_integers() -> None:
    assert render([Double(1.0), 1]) == "[1.0, 1]"


def _decoder() -> Any:
    """binlake's row decoder for a MySQL table ``(id INT PRIMARY KEY, j JSON)``."""
    from types import SimpleNamespace

    from binlake.events import Column, CreateTable, TableId
    from binlake.schema.type_mapping import RowConverter
    from binlake.source.binlog.row_decoder import RowDecoder

    table = CreateTable(
        TableId("d", "t"),
        (Column("id", "int", "int(11)", nullable=False), Column("j", "json", "json")),
        ("id",),
    )
    wire = [SimpleNamespace(type=3), SimpleNamespace(type=245, length_size=4)]
    return RowDecoder(table, wire, RowConverter(table), [0])


def _image(row_id: int, document: Any) -> bytes:
    data = encode(document)
    return b"\x00" + struct.pack("<i", row_id) + struct.pack("<I", len(data)) + data


def test_mysql_json_columns_decode_to_mysqls_text() -> None:
    document = {
        "price": _decimal(5, 2, 999),
        "at": Opaque(10, struct.pack("<q", _packed_datetime(2024, 2, 29))),
    }
    (image,) = _decoder().images(_image(1, document), update=False, lean_first=False)
    assert image == (1, '{"at": "2024-02-29", "price": 9.99}')


def test_partial_json_updates_apply_to_the_before_images_document() -> None:
    vector = _diff(0, "$.n", 1e20) + _diff(2, "$.gone")
    after = (
        b"\x01"  # binlog_row_value_options: PARTIAL_JSON_UPDATES
        + b"\x01"  # partial bits: the (only) JSON column is a diff
        + b"\x00"  # null bitmap
        + struct.pack("<i", 1)
        + struct.pack("<I", len(vector))
        + vector
    )
    data = _image(1, {"n": 1, "gone": True, "kept": "x"}) + after
    full = b"\x03"
    before, image = _decoder().images(
        data, update=True, lean_first=True, bitmaps=(full, full), partial_json=True
    )
    assert before == (1, '{"n": 1, "gone": true, "kept": "x"}')
    assert image == (1, '{"n": 1e20, "kept": "x"}')


def test_a_partial_json_update_without_the_document_is_absent() -> None:
    from binlake.source.binlog.row_decoder import ABSENT

    vector = _diff(0, "$.n", 2)
    before = b"\x00" + struct.pack("<i", 1)  # MINIMAL: the key alone
    after = b"\x01\x01\x00" + struct.pack("<I", len(vector)) + vector  # the JSON column alone
    images = _decoder().images(
        before + after, update=True, lean_first=False, bitmaps=(b"\x01", b"\x02"), partial_json=True
    )
    assert images == [(1, ABSENT), (ABSENT, ABSENT)]
