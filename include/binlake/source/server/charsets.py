"""The charset and collation defaults a server applies where DDL names none.

Kept apart from the DDL parser (which imports sqlglot) so that discovery can read them without
loading the parser: the stream's planning side imports discovery on every start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pymysql.charset import charset_by_name


def _unknown_database(_database: str) -> str | None:
    return None


@dataclass(frozen=True)
class Charsets:
    """The server's charset defaults the DDL leaves implicit."""

    default_collations: Mapping[str, str] = field(default_factory=dict)
    """charset → its default collation (information_schema.COLLATIONS, ``IS_DEFAULT``)."""
    database_collation: Callable[[str], str | None] = _unknown_database
    """A database's default collation (None: unknown, the server's default is taken)."""
    server_collation: str = "utf8mb4_general_ci"

    def collation_of(self, charset: str) -> str:
        """The default collation of ``charset``."""
        charset = canonical_charset(charset)
        if charset == "binary":
            return "binary"
        known = self.default_collations.get(charset)
        if known:
            return known
        found = charset_by_name(charset)  # pymysql's table: MariaDB's defaults
        default = getattr(found, "collation", None)
        return canonical_collation(str(default)) if default else f"{charset}_general_ci"

    def database_default(self, database: str) -> tuple[str, str]:
        """The charset and collation a table of ``database`` gets when its DDL names none."""
        collation = self.database_collation(database) or self.server_collation
        return charset_of(collation), collation


def canonical_charset(name: str) -> str:
    """``utf8`` is ``utf8mb3`` (MariaDB 10.6+ and MySQL 8 name it so in information_schema)."""
    name = name.lower()
    return "utf8mb3" if name == "utf8" else name


def canonical_collation(name: str) -> str:
    name = name.lower()
    return "utf8mb3" + name[4:] if name.startswith("utf8_") else name


def charset_of(collation: str) -> str:
    return "binary" if collation == "binary" else canonical_collation(collation).split("_")[0]
