"""pymysql cursors whose parameter substitution leaves backquoted identifiers alone.

pymysql fills ``%s`` placeholders with Python's ``%`` operator over the whole statement, so a ``%``
in a table or column name (``orders%2024``) would be read as a placeholder: the statement fails, or
worse. binlake quotes every identifier it writes into SQL (``events.quote``); inside backquotes a
``%`` is the name's own, so it is doubled there before the substitution undoes that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pymysql.cursors


def _rewrite(sql: str, inside: Callable[[str], str], outside: Callable[[str], str]) -> str:
    """``sql`` with ``inside`` applied to each backquoted identifier's text and ``outside`` to the
    rest (string literals count as the rest: a backquote in a literal quotes nothing)."""
    out: list[str] = []
    plain: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        char = sql[i]
        if char in "'\"":  # a string literal: up to its closing quote (doubled or escaped ones inside)
            j = i + 1
            while j < n and not (sql[j] == char and (j + 1 >= n or sql[j + 1] != char)):
                j += 2 if sql[j] in ("\\", char) else 1
            plain.append(sql[i : j + 1])
            i = j + 1
        elif char == "`":
            j = i + 1
            while j < n and not (sql[j] == "`" and (j + 1 >= n or sql[j + 1] != "`")):
                j += 2 if sql[j] == "`" else 1
            out.append(outside("".join(plain)))
            plain = []
            out.append("`" + inside(sql[i + 1 : j]) + "`")
            i = j + 1
        else:
            plain.append(char)
            i += 1
    out.append(outside("".join(plain)))
    return "".join(out)


def protect_identifiers(sql: str) -> str:
    """``sql`` with the ``%`` of backquoted identifiers doubled (for a statement with parameters)."""
    return _rewrite(sql, lambda name: name.replace("%", "%%"), lambda rest: rest)


def literal_percents(sql: str) -> str:
    """``sql`` (no placeholders) made ready for parameters: its own ``%`` doubled outside
    identifiers, which ``protect_identifiers`` takes care of."""
    return _rewrite(sql, lambda name: name, lambda rest: rest.replace("%", "%%"))


class _IdentifierSafe:
    # pymysql 1.1 binds parameters in ``_mogrify`` (``execute`` and ``mogrify`` both call it).
    def _mogrify(self, query: str, args: Any) -> str:
        base: Any = super()
        return str(base._mogrify(protect_identifiers(query), args))


class Cursor(_IdentifierSafe, pymysql.cursors.Cursor):
    """pymysql's buffered cursor, identifier-safe."""


class SSCursor(_IdentifierSafe, pymysql.cursors.SSCursor):
    """pymysql's streaming cursor, identifier-safe."""
