"""Statements in the binlog that change a captured table's rows out of the binlog's sight: a gap.

- **Row changes a session logged as statements.** A session may override ``binlog_format``
  (``SET SESSION binlog_format = 'STATEMENT'``, or ``MIXED``, where the server logs "safe"
  statements as text): its INSERT/UPDATE/DELETE reach the binlog as query events inside a
  transaction, with no row images, and ``LOAD DATA`` as its own events. binlake does not re-execute
  SQL (a statement's result depends on the server's data and functions), so such a change of a
  captured table cannot be replicated exactly; this module tells which tables a statement writes,
  from its text parsed with sqlglot. The text itself is never logged or stored: it may hold secrets.
- **A cascading foreign key declared** on a captured table: the child rows the server changes
  through it never reach the binlog (``source/server/foreign_keys.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Set
from typing import TYPE_CHECKING, Any

from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.source.binlog.event_rows import STATEMENT_FIX, Gap
from binlake.source.binlog.scan import text_of
from binlake.source.server.foreign_keys import adds_cascading_key, cascade_fix, ddl_target

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


def dml_gaps(
    text: str, database: str, tables: Set[TableId], offset: BinlogOffset, timestamp: int
) -> Iterator[Gap]:
    """A row change logged as a statement: a gap in every captured table (``tables``) it may write."""
    written = written_tables(text, database)
    what = (
        "rows changed by a statement logged as text (`binlog_format` STATEMENT or MIXED in the "
        "writing session), not as row images"
    )
    if written is None:
        what += "; binlake could not tell which tables it writes, so it stops for each one it captures"
    for table in sorted(tables if written is None else written & tables):
        yield Gap(table, what, STATEMENT_FIX, offset, timestamp)


def load_gaps(event: Any, tables: Set[TableId], offset: BinlogOffset) -> Iterator[Gap]:
    """``LOAD DATA`` logged as a statement: its rows are in a file the binlog does not hold."""
    table = text_of(event.table_name) if hasattr(event, "table_name") else ""
    database = text_of(event.schema)
    named = [t for t in tables if t.table == table and t.database == database]
    for target in named or sorted(tables):
        yield Gap(
            target,
            "rows loaded by `LOAD DATA` logged as a statement (`binlog_format` STATEMENT or MIXED)",
            STATEMENT_FIX,
            offset,
            int(event.timestamp),
        )


def cascade_gaps(
    text: str, database: str, tables: Set[TableId], offset: BinlogOffset, timestamp: int
) -> Iterator[Gap]:
    """A captured table that gains a cascading foreign key: the rows the server will change
    through it never reach the binlog."""
    target = ddl_target(text, database)
    if target is not None and target in tables and adds_cascading_key(text):
        yield Gap(
            target,
            "a foreign key with ON DELETE/UPDATE CASCADE or SET NULL/DEFAULT was declared on it: the "
            "child rows the server changes through it are not in the binlog",
            cascade_fix(),
            offset,
            timestamp,
        )
