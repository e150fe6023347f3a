"""Column defaults: the value a row gets for a column nobody gave a value.

The server fills defaults without any row event saying so — in inserts a session logged with
``binlog_row_image`` NOBLOB or MINIMAL (the image leaves the column out). binlake can stand in for
the server only where the default is a constant it can read exactly; an expression
(``CURRENT_TIMESTAMP``, ``UUID()``, ``(a + 1)``) has a value only the server knew, and callers
treat it as unknown.

``Column.default`` holds the text ``information_schema.COLUMNS.COLUMN_DEFAULT`` shows. MariaDB
(10.2.7+) quotes string literals (``'abc'``), writes ``NULL`` for a NULL default and SQL NULL for
none; MySQL leaves strings unquoted — which reads as "unknown" here unless the column is numeric,
so a MySQL string default is never guessed.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from binlake.events import Column, StatementClock
from binlake.schema.type_mapping import MAX_DECIMAL_PRECISION, is_bool

_INTEGER = re.compile(r"^[+-]?\d+$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_TEXT_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_FLOAT32 = struct.Struct("<f")
_WIDE = Context(prec=100)


@dataclass(frozen=True)
class Default:
    """A constant default, as the decoders give values (``row_decoder``: ints, Decimals, str …)."""

    value: Any


def literal_default(column: Column) -> Default | None:
    """The column's default if binlake can know it exactly (None: an expression, or unknown)."""
    text = column.default
    if text is None:
        return None
    if text.upper() == "NULL":
        return Default(None)
    t = column.data_type
    if column.is_integral or t in ("decimal", "float", "double", "year"):
        return _number(column, text.strip("'"))
    if t in _TEXT_TYPES and len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        return Default(_unquote(text[1:-1]))
    return None


def _number(column: Column, text: str) -> Default | None:
    t = column.data_type
    if column.is_integral or t == "year":
        if not _INTEGER.match(text):
            return None
        value = int(text)
        if is_bool(column):
            return Default(bool(value))
        if t == "bigint" and column.unsigned:
            return Default(Decimal(value))
        return Default(value)
    if not _NUMBER.match(text):
        return None
    if t == "decimal":
        try:  # DECIMAL(65, 30): wider than Python's default context
            value_d = Decimal(text).quantize(Decimal(1).scaleb(-(column.scale or 0)), context=_WIDE)
        except InvalidOperation:
            return None
        if (column.precision or 10) > MAX_DECIMAL_PRECISION:
            return Default(format(value_d, "f"))
        return Default(value_d)
    number = float(text)
    return Default(_FLOAT32.unpack(_FLOAT32.pack(number))[0] if t == "float" else number)


_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


def _unquote(body: str) -> str:
    """A MariaDB string literal's content: ``''`` and backslash escapes undone."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "'" and body[i + 1 : i + 2] == "'":
            out.append("'")
            i += 2
        elif c == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


_NOW = re.compile(r"^(current_timestamp|now|localtimestamp|localtime)(\(\s*(\d*)\s*\))?$")


def normalised_default(column: Column) -> tuple[str, Any]:
    """A column's default in a form two readings of it compare by: ``("none", None)`` for no
    default, ``("value", v)`` for a constant binlake reads, ``("now", fsp)`` for the current time,
    else ``("expression", text)`` (lower case, without spaces)."""
    text = column.default
    if text is None:  # a nullable column without a DEFAULT has the default NULL
        return ("value", None) if column.nullable else ("none", None)
    found = literal_default(column)
    if found is not None:
        return ("value", found.value)
    squeezed = "".join(text.lower().split())
    now = _NOW.match(squeezed)
    if now:
        return ("now", int(now.group(3) or 0))
    # an expression: only "it is one" matters to binlake (the server alone knows its value), so
    # quoting and parentheses, which servers print each their own way, are left out
    bare = squeezed.translate(str.maketrans("", "", "'\"\\"))
    while bare.startswith("(") and bare.endswith(")"):
        bare = bare[1:-1]
    return ("expression", bare)


#: Types whose implicit default (a NOT NULL column added without DEFAULT) is 0, and ''.
_ZERO_TYPES = {"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "float", "double"}
_EMPTY_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "set"}
_EMPTY_BYTES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


def existing_rows_value(column: Column, clock: StatementClock) -> Default | None:
    """The value ``ALTER TABLE … ADD COLUMN column`` gives the rows the table already holds, as the
    decoders give values; None where only the server knew it.

    The server fills those rows without a row event: with the column's default, a NOT NULL
    column without one with its type's implicit default (0, '', an ENUM's first member), and the
    current time with the statement's own (``clock``: the query event's time, its fraction and
    the session's time zone) — ``CURRENT_TIMESTAMP(fsp)`` of a TIMESTAMP or DATETIME,
    ``CURDATE()`` of a DATE. AUTO_INCREMENT numbers, generated columns and other expressions
    were computed row by row: those are the server's alone.
    """
    if column.generated or column.auto_increment:
        return None
    if column.default is None:
        return Default(None) if column.nullable else _implicit(column)
    found = literal_default(column)
    if found is not None:
        return found
    kind, detail = normalised_default(column)
    if kind == "now":
        return _statement_now(column, clock, detail)
    if kind == "expression" and detail in _TODAY and column.data_type == "date" and clock.local:
        return Default(clock.local.date())
    return None


_TODAY = {"curdate()", "current_date", "current_date()"}


def _statement_now(column: Column, clock: StatementClock, fsp: int) -> Default | None:
    """``CURRENT_TIMESTAMP(fsp)`` of the statement: a TIMESTAMP holds the instant (decoded as UTC),
    a DATETIME the session's wall-clock time; the fraction truncated to ``fsp`` digits."""
    if column.data_type == "timestamp":
        base: dt.datetime | None = dt.datetime.fromtimestamp(clock.epoch, dt.UTC).replace(tzinfo=None)
    elif column.data_type == "datetime":
        base = clock.local
    else:
        return None
    if base is None or fsp > (column.fsp or 0):
        # a narrower column rounds or truncates by the session's sql_mode (and the server's kind)
        return None
    if fsp == 0:
        return Default(base)
    if clock.micros is None:
        return None  # the server wrote no fraction: binlake cannot tell it
    step = 10 ** (6 - fsp)
    return Default(base.replace(microsecond=clock.micros // step * step))


def _implicit(column: Column) -> Default | None:
    t = column.data_type
    if t in _ZERO_TYPES or t == "year":
        return _number(column, "0")
    if t in _EMPTY_TYPES:
        return Default("")
    if t in _EMPTY_BYTES:
        return Default(b"")
    if t == "enum" and column.values:
        return Default(column.values[0])
    return None  # temporal zero values, BIT, JSON, spatial types: left to the server
