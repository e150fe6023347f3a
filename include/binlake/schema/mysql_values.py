"""MySQL's results for single values where Python's differ: ``MOD``'s sign, ``DIV``'s truncation,
a ``CAST``'s clamp to the target's range and ``SUBSTRING``'s positions (``schema.transform_eval``
applies them to a column at a time), and a decimal context no DECIMAL(65) quotient rounds in."""

from __future__ import annotations

from decimal import Context, Decimal, DivisionByZero, InvalidOperation
from typing import Any

#: Wide enough for any DECIMAL(65) operand: a quotient or remainder never rounds.
WIDE = Context(prec=200, traps=[DivisionByZero, InvalidOperation])


def clamp(value: Decimal, low: Decimal, high: Decimal) -> Decimal:
    """``value`` within [low, high] (the server's CAST clamps an out-of-range value, with a warning)."""
    return min(max(value, low), high)


def remainder(a: Any, b: Any) -> Any:
    """MySQL's ``MOD``: the dividend's sign (Python's ``%`` on ints takes the divisor's; on
    Decimals it already takes the dividend's); NULL for a zero divisor."""
    if b == 0:
        return None
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return Decimal(a) % Decimal(b)
    magnitude = abs(a) % abs(b)
    return -magnitude if a < 0 else magnitude


def quotient(a: Any, b: Any) -> Any:
    """MySQL's ``DIV``: truncated toward zero (a DECIMAL's quotient too); NULL for a zero divisor."""
    if b == 0:
        return None
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return int(Decimal(a) // Decimal(b))
    magnitude = abs(a) // abs(b)
    return -magnitude if (a < 0) != (b < 0) else magnitude


def substring(text: str, start: int, length: int | None = None) -> str:
    """MySQL's ``SUBSTRING``: 1-based, negative from the end, 0 (or before the start) → ''."""
    if start > 0:
        begin = start - 1
    elif start < 0 and -start <= len(text):
        begin = len(text) + start
    else:
        return ""
    if length is None:
        return text[begin:]
    return text[begin : begin + length] if length > 0 else ""
