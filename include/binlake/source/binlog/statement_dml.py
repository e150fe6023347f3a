"""Row changes a session logged as statements: which tables they change.

A session may override ``binlog_format`` (``SET SESSION binlog_format = 'STATEMENT'``, or
``MIXED``, where the server logs "safe" statements as text): its INSERT/UPDATE/DELETE reach the
binlog as query events inside a transaction, with no row images. binlake does not re-execute SQL
(a statement's result depends on the server's data and functions), so such a change of a captured
table cannot be replicated exactly; this module only tells which tables a statement writes, from
its text parsed with sqlglot. The text itself is never logged or stored: it may hold secrets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from binlake.events import TableId

if TYPE_CHECKING:
    from sqlglot import exp

#: First keywords of statements that change rows (LOAD DATA arrives as its own events).
DML_KEYWORDS = ("INSERT", "REPLACE", "UPDATE", "DELETE")


def is_dml(text: str) -> bool:
    """Whether ``text`` is a row-changing statement (by its first keyword)."""
    head = text.lstrip().split(None, 1)
    return bool(head) and head[0].upper() in DML_KEYWORDS


def written_tables(text: str, database: str) -> set[TableId] | None:
    """The tables a DML statement writes (None: its text cannot be read, so any table may be).

    ``database``: the session's default database (unqualified names belong there).
    """
    # Imported here: statement-logged DML is rare, and sqlglot is a tenth of a second of the start
    # of every process that reads the binlog (the snapshot's task workers among them).
    import sqlglot
    from sqlglot import exp

    try:
        statement = sqlglot.parse_one(text, read="mysql")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return None
    targets: list[exp.Table] = []
    if isinstance(statement, exp.Insert):
        target = statement.this
        targets.append(target.this if isinstance(target, exp.Schema) else target)
    elif isinstance(statement, exp.Update):
        # A multi-table UPDATE may change any of its tables.
        targets.extend(statement.find_all(exp.Table))
    elif isinstance(statement, exp.Delete):
        named = statement.args.get("tables") or [statement.this]
        targets.extend(t for t in named if isinstance(t, exp.Table))
    else:
        return None
    found = {_table_id(t, database) for t in targets if isinstance(t, exp.Table)}
    return found or None


def _table_id(table: exp.Table, database: str) -> TableId:
    return TableId(table.db or database, table.name)
