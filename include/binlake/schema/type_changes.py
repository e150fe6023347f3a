"""Whether a column's new type changed the values the server held: ``MODIFY``/``CHANGE`` rewrites
every row of the table with each value converted, and no row event says so.

Some conversions round whatever the session's ``sql_mode``: a ``DATETIME(3)`` made ``DATETIME(0)``,
a ``DECIMAL(10,2)`` made ``DECIMAL(10,0)``, a ``DOUBLE`` made ``FLOAT``. Others clip or cut a value
that does not fit (a shorter ``VARCHAR``, a smaller integer, NULLs into ``NOT NULL``, an ``ENUM``
member gone): in strict mode (``STRICT_TRANS_TABLES``/``STRICT_ALL_TABLES``, the servers' default)
the statement fails instead, so a strict ``ALTER`` that ran changed nothing — but ``ALTER IGNORE``
and a non-strict session convert. A value made text is the same value (its rendering: what the
sink's behaviour does with a column whose type it cannot follow is its own rule); text parsed into
a number or a time is cut where it does not parse. The stream heals a table whose values may have
changed by a backfill read after the statement (``stream/server_filled.py``).
"""

from __future__ import annotations

import re

from binlake.events import Column

#: ``sql_mode`` bits of the strict modes (the query event's ``Q_SQL_MODE_CODE``; MySQL and MariaDB).
STRICT_MODES = (1 << 21) | (1 << 22)

_INT_BYTES = {"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "bigint": 8}
_INT_DIGITS = {"tinyint": 3, "smallint": 5, "mediumint": 8, "int": 10, "bigint": 20}
_TEMPORAL = {"datetime", "timestamp", "time"}
_DATES = {"date", *_TEMPORAL}
_TEXT = ["tinytext", "text", "mediumtext", "longtext"]
_BLOB = ["tinyblob", "blob", "mediumblob", "longblob"]
_CHARS = {"char", "varchar", *_TEXT}
_BYTES = {"binary", "varbinary", *_BLOB}
_IGNORE = re.compile(r"\s*(?:/\*.*?\*/\s*)*ALTER\s+(?:ONLINE\s+)?IGNORE\s", re.IGNORECASE | re.DOTALL)


def strict_statement(sql_mode: int | None, statement: str) -> bool:
    """Whether ``statement`` ran where a value that does not fit fails it: a strict session
    (``sql_mode``, None: not written — taken as not strict) and no ``ALTER IGNORE``."""
    return sql_mode is not None and bool(sql_mode & STRICT_MODES) and not _IGNORE.match(statement)


def changed_values(old: Column, new: Column, strict: bool) -> str | None:
    """How the server may have changed the values of ``old`` made ``new`` (None: every value reads
    the same after); ``strict``: the statement fails on a value that does not fit."""
    rounded = _rounded(old, new)
    if rounded is not None:
        return rounded
    if strict:
        return None
    if old.nullable and not new.nullable:
        return "NULLs became the type's zero value"
    return _cut(old, new)


def widened(old: Column, new: Column) -> bool:
    """Whether ``new`` only widens ``old``: every value stays, in the same family of types (an
    expression over it means what it did), whatever the session."""
    same_family = _family(old.data_type) == _family(new.data_type)
    return same_family and changed_values(old, new, strict=False) is None


def _rounded(old: Column, new: Column) -> str | None:
    """Conversions that change values even in strict mode."""
    a, b = old.data_type, new.data_type
    if new.generated:
        return "values computed again from the column's expression"
    if new.auto_increment and not old.auto_increment:
        return "zeros and NULLs given sequence numbers"
    if a == b and a in _TEMPORAL and (new.fsp or 0) < (old.fsp or 0):
        return f"fractions of a second rounded to {new.fsp or 0} digits"
    if a == b == "decimal" and (new.scale or 0) < (old.scale or 0):
        return f"decimals rounded to {new.scale or 0} places"
    if a == "double" and b == "float":
        return "values rounded to single precision"
    if a == "varchar" and b == "char":
        return "trailing spaces dropped"
    if _family(a) == "number" and _family(b) == "number" and a != b and not _exact_number(a, b):
        return f"values converted from {old.column_type} to {new.column_type}"
    if a in _DATES and b in _DATES and a != b and not (a == "date" or (a, b) == ("datetime", "timestamp")):
        return f"values converted from {old.column_type} to {new.column_type}"
    return None


def _exact_number(a: str, b: str) -> bool:
    """Whether every value of numeric type ``a`` is one of ``b`` (its range aside: ``_cut``)."""
    if a in _INT_BYTES and b in (*_INT_BYTES, "decimal"):
        return True
    if a in _INT_BYTES and b in ("double", "float"):  # a 53-bit or 24-bit mantissa
        return _INT_BYTES[a] <= (4 if b == "double" else 2)
    return a == "float" and b == "double"


def _cut(old: Column, new: Column) -> str | None:
    """Conversions that clip or cut what does not fit (strict mode fails the statement instead)."""
    a, b = old.data_type, new.data_type
    if a in _INT_BYTES and b in _INT_BYTES:
        narrower = _INT_BYTES[b] < _INT_BYTES[a] + (1 if old.unsigned and not new.unsigned else 0)
        if narrower or (new.unsigned and not old.unsigned):
            return f"values outside {new.column_type} clipped"
    if b == "decimal" and _digits(new) < (_INT_DIGITS.get(a) or _digits(old)):
        return f"values outside {new.column_type} clipped"
    if (a in _CHARS and b in _CHARS) or (a in _BYTES and b in _BYTES):
        if _length(new) < _length(old):
            return f"values longer than {new.column_type} cut"
        if old.charset not in (new.charset, None) and new.charset not in (None, "utf8mb4"):
            # utf8mb4 holds every character of every charset: nothing to lose converting to it
            return f"text converted from {old.charset} to {new.charset}"
    if a == b and a in ("enum", "set") and not set(old.values) <= set(new.values):
        return "members no longer defined became ''"
    if _family(a) != _family(b) and _family(b) != "text" and not (a in _DATES and b in _DATES):
        return f"values converted from {old.column_type} to {new.column_type}"
    return None


def _family(data_type: str) -> str:
    if data_type in _INT_BYTES or data_type in ("decimal", "float", "double", "bit"):
        return "number"
    if data_type in _CHARS:
        return "text"
    if data_type in _BYTES:
        return "bytes"
    return data_type  # date, datetime, enum, json … each its own


def _digits(column: Column) -> int:
    """Digits before the decimal point."""
    return (column.precision or 10) - (column.scale or 0)


def _length(column: Column) -> int:
    if column.length is not None:
        return column.length
    for kinds in (_TEXT, _BLOB):
        if column.data_type in kinds:
            return (255, 65_535, 16_777_215, 4_294_967_295)[kinds.index(column.data_type)]
    return 1
