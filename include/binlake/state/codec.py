"""Chunk-key values ↔ JSON text, keeping their types (an int stays an int, bytes stay bytes).

Chunk borders are stored as text in the state store and sent back to the server as query
parameters; a border that came back as a string instead of an int or bytes would compare
differently, so every value carries its type tag.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any


def encode_key(value: Any) -> str | None:
    """A key value as tagged JSON text (None stays None: an unbounded border)."""
    if value is None:
        return None
    return json.dumps(_tag(value), ensure_ascii=False)


def decode_key(text: str | None) -> Any:
    if text is None:
        return None
    tag, raw = next(iter(json.loads(text).items()))
    return _DECODERS[tag](raw)


def _tag(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": str(value)}  # as text: JSON readers may round ints above 2^53
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, bytes | bytearray):
        return {"bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"timedelta": [value.days, value.seconds, value.microseconds]}
    raise TypeError(f"cannot store a chunk key of type {type(value).__name__}: {value!r}")


_DECODERS: dict[str, Any] = {
    "bool": bool,
    "int": int,
    "decimal": Decimal,
    "float": float,
    "str": str,
    "bytes": lambda raw: base64.b64decode(raw),
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "timedelta": lambda raw: dt.timedelta(days=raw[0], seconds=raw[1], microseconds=raw[2]),
}
