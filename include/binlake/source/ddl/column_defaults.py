"""A column's DEFAULT: read from DDL (``default_value``) and spelled as information_schema shows
it (``default_text``; ``schema.defaults`` reads it back) — numbers as the column's type rounds
them, temporal values with the column's fractional digits, strings in the column's charset.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation

from binlake.events import Column
from binlake.source.ddl.column_types import decoded, hex_bytes
from binlake.source.ddl.tokens import Cursor, Tok

_TEMPORAL = {"date", "time", "datetime", "timestamp"}


_NOW = {"CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP"}


def default_value(cur: Cursor) -> tuple[str, object]:
    """A DEFAULT's value: ``(kind, value)`` with kind null/number/string/bytes/bits/now/expression."""
    if cur.is_punct("("):
        start = cur.at
        cur.skip_parenthesised()
        inner = cur.toks[start + 1 : cur.at - 1]
        if len(inner) == 1 and inner[0].kind in ("number", "string"):
            return ("number" if inner[0].kind == "number" else "string", inner[0].text)
        return ("expression", _joined(cur.toks[start : cur.at]))
    introducer = cur.introducer()
    if introducer is not None and (tok := cur.peek()) is not None and tok.kind == "hex":
        cur.next()
        value = hex_bytes(tok.text)
        return ("bytes", value) if introducer == "binary" else ("string", decoded(value, introducer))
    sign = ""
    if cur.is_punct("-") or cur.is_punct("+"):
        sign = "-" if cur.next().text == "-" else ""
    tok = cur.next()
    if tok.kind == "punct" and tok.text == "." and (nxt := cur.peek()) is not None and nxt.kind == "number":
        return ("number", sign + "0." + cur.next().text)
    if tok.kind == "number":
        return ("number", sign + tok.text)
    if tok.kind in ("string", "hex"):
        if tok.kind == "hex":
            return ("bytes", hex_bytes(tok.text))
        text = tok.text
        while (nxt := cur.peek()) is not None and nxt.kind == "string":
            text += cur.next().text
        return ("string", text)
    if tok.kind == "bit":
        return ("bits", tok.text)
    word = tok.upper
    if word == "NULL":
        return ("null", None)
    if word in ("TRUE", "FALSE"):
        return ("number", "1" if word == "TRUE" else "0")
    if word in _NOW:
        fsp = 0
        if cur.accept_punct("("):
            if not cur.is_punct(")"):
                fsp = int(cur.next().text)
            cur.expect_punct(")")
        return ("now", fsp)
    if cur.is_punct("("):  # a function: uuid(), curdate(), nextval(s)
        start = cur.at
        cur.skip_parenthesised()
        return ("expression", tok.text + _joined(cur.toks[start : cur.at]))
    return ("expression", tok.text)


def _joined(toks: list[Tok]) -> str:
    return "".join(f"'{t.text}'" if t.kind == "string" else t.text for t in toks)


def default_text(column: Column, default: tuple[str, object] | None) -> str | None:
    if default is None:
        return None
    kind, value = default
    if kind == "null":
        return "NULL"
    if kind == "now":
        return f"current_timestamp({value or ''})"
    if kind == "expression":
        return str(value)
    t = column.data_type
    if column.is_integral or t in ("decimal", "float", "double", "year", "bit"):
        return _numeric_default(column, kind, value)
    if kind == "bits":  # b'101' for a text column: the bytes of that number
        number = int(str(value) or "0", 2)
        value = number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")
    if isinstance(value, bytes):
        if column.charset is not None:
            text = decoded(value, column.charset)
        else:
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                return "X'" + value.hex() + "'"  # how the server shows bytes that are no text
    else:
        text = str(value)
    if t in _TEMPORAL:
        text = _temporal(t, text, column.fsp or 0)
    if t in ("enum", "set"):
        text = text.rstrip(" ")
    if t == "binary" and column.length:
        text = text.ljust(column.length, "\0")  # BINARY(n) pads with zero bytes
    escaped = text.replace("\\", "\\\\").replace("\0", "\\0").replace("'", "''")
    return "'" + escaped + "'"


def _numeric_default(column: Column, kind: str, value: object) -> str:
    if kind == "bytes":
        number = Decimal(int.from_bytes(value, "big")) if isinstance(value, bytes) else Decimal(0)
    elif kind == "bits":
        number = Decimal(int(str(value) or "0", 2))
    else:
        try:
            number = Decimal(str(value).strip())
        except InvalidOperation:
            return "'" + str(value) + "'"
    if column.data_type == "bit":
        return "b'" + format(int(number), "b") + "'"
    if column.data_type == "year":
        year = int(number.to_integral_value(ROUND_HALF_UP))
        if (kind == "string" and year == 0) or 0 < year < 70:
            year += 2000  # two-digit years: 1-69 are 2001-2069, 70-99 are 1970-1999
        elif 70 <= year <= 99:
            year += 1900
        return str(year)
    if column.is_integral:
        return str(int(number.to_integral_value(ROUND_HALF_UP)))
    if column.data_type == "decimal":
        exponent = Decimal(1).scaleb(-(column.scale or 0))
        return format(number.quantize(exponent, ROUND_HALF_UP, context=_WIDE), "f")
    return format(number, "f") if -(10**15) < number < 10**15 else str(number)


_DIGITS = re.compile(r"\d+")


_WIDE = Context(prec=100)  # DECIMAL(65, 30) defaults


def _temporal(data_type: str, text: str, fsp: int) -> str:
    """A temporal literal in the server's spelling (``'2024-1-2 1:2'`` → ``2024-01-02 01:02:00``)."""
    parts = _DIGITS.findall(text)
    if not parts:
        return text
    if len(parts) == 1 and len(parts[0]) in (6, 8, 12, 14):  # compact: YYYYMMDD[HHMMSS], HHMMSS
        digits = parts[0]
        if data_type == "time" and len(digits) == 6:
            parts = [digits[0:2], digits[2:4], digits[4:6]]
        else:
            year = 4 if len(digits) in (8, 14) else 2
            parts = [digits[:year]] + [digits[i : i + 2] for i in range(year, len(digits), 2)]
    if data_type == "time":
        sign = "-" if text.strip().startswith("-") else ""
        if "-" in text.strip().lstrip("-") and " " in text.strip():
            parts = parts[3:]  # a datetime given to a TIME: its time part
        h, m, sec, frac = [*parts, "0", "0", "0", ""][:4] if len(parts) > 1 else ["0", "0", parts[0], ""]
        shown = f"{sign}{int(h):02d}:{int(m):02d}:{int(sec):02d}"
        return shown + _fraction(frac, fsp)
    y, mo, d = [*parts, "0", "0", "0"][:3]
    date = f"{int(y):04d}-{int(mo):02d}-{int(d):02d}"
    if data_type == "date":
        return date
    h, mi, sec, frac = [*parts[3:], "0", "0", "0", ""][:4]
    return f"{date} {int(h):02d}:{int(mi):02d}:{int(sec):02d}" + _fraction(frac, fsp)


def _fraction(frac: str, fsp: int) -> str:
    return "." + (frac + "0" * fsp)[:fsp] if fsp else ""
