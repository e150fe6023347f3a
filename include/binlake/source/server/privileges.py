"""What the connected user may do, read from ``SHOW GRANTS``.

``information_schema.USER_PRIVILEGES`` would be simpler but lists *every* account to a user with
global SELECT, and names differ between servers; SHOW GRANTS is the same statement everywhere.
Privileges that reach the user only through a role are not seen (documented in docs/sources.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pymysql

#: Same privilege, another name: MariaDB 10.5+ shows REPLICATION CLIENT as BINLOG MONITOR.
_ALIASES = {"BINLOG MONITOR": "REPLICATION CLIENT"}

_GRANT = re.compile(
    r"^GRANT\s+(?P<privs>.+?)\s+ON\s+(?:(?:TABLE|FUNCTION|PROCEDURE)\s+)?"
    r"(?P<db>\*|`(?:[^`]|``)+`|[\w$]+)\.(?P<table>\*|`(?:[^`]|``)+`|[\w$]+)\s+TO\s",
    re.IGNORECASE | re.DOTALL,
)


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _split_privileges(text: str) -> list[str]:
    """Split ``SELECT (a, b), INSERT`` at top-level commas, dropping column lists."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        if depth == 0 and char != ")":
            current.append(char)
    parts.append("".join(current))
    names = (" ".join(p.split()).upper() for p in parts)
    return [_ALIASES.get(n, n) for n in names if n]


def _like(pattern: str, name: str) -> bool:
    """Database-level grants may use LIKE wildcards (`shop\\_%`.*)."""
    regex = "".join(
        ".*" if token == "%" else "." if token == "_" else re.escape(token[-1])
        for token in re.findall(r"\\.|%|_|[^\\%_]", pattern)
    )
    return re.fullmatch(regex, name) is not None


@dataclass
class Grants:
    """Global, database-level and table-level privileges of one user."""

    global_privs: set[str] = field(default_factory=set)
    database_privs: dict[str, set[str]] = field(default_factory=dict)
    table_privs: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, lines: Iterable[str]) -> Grants:
        grants = cls()
        for line in lines:
            match = _GRANT.match(line.strip())
            if not match:
                continue  # GRANT role TO user, PROXY grants: no object privileges.
            privs = set(_split_privileges(match.group("privs")))
            db, table = _unquote(match.group("db")), _unquote(match.group("table"))
            if db == "*":
                grants.global_privs |= privs
            elif table == "*":
                grants.database_privs.setdefault(db, set()).update(privs)
            else:
                grants.table_privs.setdefault((db, table), set()).update(privs)
        return grants

    def has_global(self, privilege: str) -> bool:
        return privilege in self.global_privs or "ALL PRIVILEGES" in self.global_privs

    def can_select(self, database: str, table: str) -> bool:
        scopes = [
            self.global_privs,
            *(p for pattern, p in self.database_privs.items() if _like(pattern, database)),
            self.table_privs.get((database, table), set()),
        ]
        return any("SELECT" in s or "ALL PRIVILEGES" in s for s in scopes)


def current_grants(conn: pymysql.Connection[Any]) -> Grants:
    """The grants of the connected user."""
    with conn.cursor() as cur:
        cur.execute("SHOW GRANTS")
        return Grants.parse(str(row[0]) for row in cur.fetchall())
