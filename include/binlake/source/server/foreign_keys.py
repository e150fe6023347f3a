"""Foreign keys whose actions change rows the binlog never shows.

``ON DELETE CASCADE``, ``ON UPDATE CASCADE``, ``SET NULL`` and ``SET DEFAULT``: when a parent row
is deleted or its key changes, InnoDB changes the child rows itself, inside the storage engine —
MySQL (up to 8.4) and MariaDB write only the parent's row event to the binlog. A captured child
table would keep rows its source no longer has. binlake refuses such tables (``validate`` and
``plan``, and the stream when one appears) rather than let the sink drift; the fixes are to make
the application delete or update the children itself (``RESTRICT``/``NO ACTION``: the binlog then
holds every change) or to leave the child table out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymysql

from binlake.events import TableId
from binlake.source.server.discovery import rows_of

if TYPE_CHECKING:
    from sqlglot import Token

#: The actions that change child rows in the engine.
CASCADING = ("CASCADE", "SET NULL", "SET DEFAULT")


@dataclass(frozen=True)
class CascadingKey:
    """A foreign key of ``child`` whose action changes its rows when ``parent`` changes."""

    child: TableId
    name: str
    parent: TableId
    on_delete: str
    on_update: str

    def describe(self) -> str:
        rules = (("DELETE", self.on_delete), ("UPDATE", self.on_update))
        actions = [f"ON {event} {rule}" for event, rule in rules if rule in CASCADING]
        return f"`{self.child}` has `{self.name}` REFERENCES `{self.parent}` {' '.join(actions)}"


def cascading_keys(conn: pymysql.Connection[Any], tables: Sequence[TableId]) -> list[CascadingKey]:
    """The cascading foreign keys of these (child) tables.

    Read from each child's ``SHOW CREATE TABLE``: ``information_schema.REFERENTIAL_CONSTRAINTS``
    (which has the rules) shows MariaDB's SELECT-only users nothing; ``KEY_COLUMN_USAGE`` says
    which tables have foreign keys at all.
    """
    if not tables:
        return []
    rows = rows_of(
        conn,
        "SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME FROM information_schema.KEY_COLUMN_USAGE "
        "WHERE TABLE_SCHEMA IN %s AND TABLE_NAME IN %s AND REFERENCED_TABLE_NAME IS NOT NULL",
        tables,
    )
    children = sorted({TableId(str(d), str(t)) for d, t in rows} & set(tables))
    found: list[CascadingKey] = []
    with conn.cursor() as cur:
        for child in children:
            cur.execute(f"SHOW CREATE TABLE {child.quoted()}")
            found += declared_keys(child, str(cur.fetchone()[1]))
    return [k for k in found if k.on_delete in CASCADING or k.on_update in CASCADING]


def declared_keys(table: TableId, statement: str) -> list[CascadingKey]:
    """The foreign keys a CREATE TABLE statement declares, with their actions (RESTRICT when
    none is given: MySQL's default)."""
    from sqlglot import TokenType

    found = _tokens(statement)
    if found is None:
        return []
    words = [t.text for t in found if t.token_type != TokenType.STRING]
    upper = [w.upper() for w in words]
    keys: list[CascadingKey] = []
    for i, word in enumerate(upper):
        if word != "REFERENCES":
            continue
        name = _constraint_name(upper, words, i)
        j = i + 1
        parent = TableId(table.database, words[j])
        if j + 2 < len(words) and words[j + 1] == ".":
            parent = TableId(words[j], words[j + 2])
        rules = {"DELETE": "RESTRICT", "UPDATE": "RESTRICT"}
        k = j
        while (
            k < len(upper)
            and upper[k] not in (",", "CONSTRAINT", "REFERENCES")
            and not (upper[k] == ")" and k + 1 < len(upper) and upper[k + 1] in ("ENGINE", ";"))
        ):
            if upper[k] == "ON" and k + 2 < len(upper) and upper[k + 1] in rules:
                action = upper[k + 2]
                if action in ("SET", "NO") and k + 3 < len(upper):
                    action = f"{action} {upper[k + 3]}"
                rules[upper[k + 1]] = action
            k += 1
        keys.append(CascadingKey(table, name, parent, rules["DELETE"], rules["UPDATE"]))
    return keys


def _constraint_name(upper: list[str], words: list[str], references: int) -> str:
    """The name of the foreign key whose REFERENCES is at ``references`` (``CONSTRAINT name
    FOREIGN KEY [index] (columns) REFERENCES``, as SHOW CREATE TABLE writes it)."""
    for i in range(references - 1, -1, -1):
        if upper[i] == "FOREIGN KEY":
            if i >= 2 and upper[i - 2] == "CONSTRAINT":
                return words[i - 1]
            break
    return "(unnamed)"


def adds_cascading_key(statement: str) -> bool:
    """Whether a CREATE/ALTER TABLE statement declares a foreign key with a cascading action
    (read with sqlglot's tokenizer: comments and string literals cannot fool it)."""
    from sqlglot import TokenType

    tokens = _tokens(statement)
    if tokens is None:
        return "REFERENCES" in statement.upper()  # unreadable: err on the side of stopping
    words = [t.text.upper() for t in tokens if t.token_type != TokenType.STRING]
    if "REFERENCES" not in words:
        return False
    for i, word in enumerate(words[:-2]):
        if word == "ON" and words[i + 1] in ("DELETE", "UPDATE"):
            action = words[i + 2]
            if action == "CASCADE" or (
                action == "SET" and i + 3 < len(words) and words[i + 3] in ("NULL", "DEFAULT")
            ):
                return True
    return False


def cascade_fix(key: CascadingKey | None = None) -> str:
    """How to make a child table's changes visible in the binlog, or leave it out."""
    child = f"`{key.child}`" if key else "the child table"
    name = f"`{key.name}`" if key else "<key>"
    return (
        f"make the application delete/update {child}'s rows itself — `ALTER TABLE {child} DROP FOREIGN "
        f"KEY {name}, ADD CONSTRAINT {name} FOREIGN KEY (…) REFERENCES … ON DELETE RESTRICT ON UPDATE "
        f"RESTRICT` (the binlog then holds every change) — or leave {child} out (`source.tables_exclude`)"
    )


def ddl_target(statement: str, database: str) -> TableId | None:
    """The table a CREATE TABLE or ALTER TABLE statement defines (None: another statement)."""
    from sqlglot import TokenType

    found = _tokens(statement)
    if found is None:
        return None
    tokens = [t for t in found if t.token_type != TokenType.SEMICOLON]
    words = [t.text.upper() for t in tokens]
    skip = {"OR", "REPLACE", "ONLINE", "IGNORE", "IF", "NOT", "EXISTS"}
    if not words or words[0] not in ("CREATE", "ALTER"):
        return None
    i = 1
    while i < len(words) and words[i] in skip:
        i += 1
    if i >= len(words) or words[i] != "TABLE":
        return None  # CREATE TEMPORARY TABLE, views, indexes …
    i += 1
    while i < len(words) and words[i] in skip:
        i += 1
    if i >= len(tokens):
        return None
    name = tokens[i].text
    if i + 2 < len(tokens) and tokens[i + 1].token_type == TokenType.DOT:
        return TableId(name, tokens[i + 2].text)
    return TableId(database, name)


def _tokens(statement: str) -> list[Token] | None:
    """sqlglot's MySQL tokens of ``statement`` (None: it cannot be tokenized)."""
    # Imported here: a table statement in the binlog is rare, and sqlglot is a tenth of a second of
    # the start of every process that reads the binlog (the snapshot's task workers among them).
    from sqlglot.dialects.mysql import MySQL
    from sqlglot.errors import TokenError

    try:
        return MySQL().tokenize(statement)
    except TokenError:
        return None
