"""How a column's values lie in a rows event, for the column decoder (``column_decoder``): a
fixed width, or a length prefix and that many bytes — for the types it decodes; None for the others
(``row_decoder`` takes those)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pymysqlreplication.constants import FIELD_TYPE

from binlake.events import Column
from binlake.schema.type_mapping import arrow_type, is_bool
from binlake.source.binlog.column_codecs import decimal_groups, text_encoding

#: Widest DECIMAL decoded here: its unscaled value fits in an int64.
MAX_PRECISION = 18
_INTS = {
    FIELD_TYPE.TINY: 1,
    FIELD_TYPE.SHORT: 2,
    FIELD_TYPE.INT24: 3,
    FIELD_TYPE.LONG: 4,
    FIELD_TYPE.LONGLONG: 8,
}


@dataclass(frozen=True)
class Spec:
    """How one column is laid out and decoded: ``width`` bytes, or a ``prefix``-byte length and
    that many bytes."""

    kind: str  # int, bool, float, decimal, date, datetime, timestamp, text, bytes
    arrow: pa.DataType
    width: int = 0
    prefix: int = 0
    signed: bool = True
    precision: int = 0
    scale: int = 0
    fraction: int = 0  # bytes of a DATETIME2/TIMESTAMP2 fraction


def column_spec(column: Column, wire: Any) -> Spec | None:
    """The spec of one column (``wire``: the table map's column), or None if not decoded here."""
    t, target = wire.type, arrow_type(column)
    if t in _INTS:
        if column.data_type == "bigint" and column.unsigned:
            return None  # a DECIMAL(20, 0) in Arrow
        kind = "bool" if is_bool(column) else "int"
        return Spec(kind, target, width=_INTS[t], signed=not column.unsigned)
    if t in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
        return Spec("float", target, width=4 if t == FIELD_TYPE.FLOAT else 8)
    if t == FIELD_TYPE.NEWDECIMAL:
        if wire.precision > MAX_PRECISION:
            return None
        size = sum(size for size, _ in decimal_groups(wire.precision, wire.decimals))
        return Spec("decimal", target, width=size, precision=wire.precision, scale=wire.decimals)
    if t == FIELD_TYPE.DATE:
        return Spec("date", target, width=3)
    if t == FIELD_TYPE.DATETIME2:
        fraction = (wire.fsp + 1) // 2
        return Spec("datetime", target, width=5 + fraction, fraction=fraction)
    if t == FIELD_TYPE.TIMESTAMP2:
        fraction = (wire.fsp + 1) // 2
        return Spec("timestamp", target, width=4 + fraction, fraction=fraction)
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.VAR_STRING, FIELD_TYPE.BLOB):
        if column.data_type == "binary":
            return None  # the binlog drops BINARY(n)'s trailing zeros: row_decoder pads them
        prefix = wire.length_size if t == FIELD_TYPE.BLOB else 2 if wire.max_length > 255 else 1
        encoding = text_encoding(column, wire)
        if encoding == "utf-8" and target == pa.string():
            return Spec("text", target, prefix=prefix)
        if encoding is None and target == pa.binary():
            return Spec("bytes", target, prefix=prefix)
    return None
