"""Schema history: every version of a source table's schema, with the binlog position it began at.

Decoding a row needs the schema the row was written with, not today's (a catch-up that crosses a
DDL, a restart after one). ``evolve`` computes a table's next version from a ``SchemaChange``; the
state store keeps the versions (``state.schema_history``: ``record`` / ``at``), keyed by position,
so ``schema_at(table, p)`` is the version in force at p — after a restart too.
"""

from __future__ import annotations

from dataclasses import replace

from binlake.events import (
    AddColumn,
    AlterColumnDefault,
    AlterColumnType,
    AlterPrimaryKey,
    AlterTableCollation,
    CreateTable,
    DropColumn,
    DropTable,
    PartitionRowsChanged,
    RenameColumn,
    RenameTable,
    SchemaChange,
    TableId,
    TruncateTable,
)


class SchemaEvolutionError(ValueError):
    """A change that does not fit the schema it is applied to (a missing or duplicate column)."""


def evolve(table: TableId, schema: CreateTable | None, change: SchemaChange) -> CreateTable | None:
    """The schema of ``table`` after ``change`` (None: the table no longer exists under that name).

    For the new name of a renamed table, ``schema`` is the old name's.
    """
    if isinstance(change, CreateTable):
        return change if change.table == table else schema
    if isinstance(change, RenameTable):
        if change.new_table == table:
            if schema is None:
                raise SchemaEvolutionError(f"{change.table} is renamed to {table}, but its schema is unknown")
            return replace(schema, table=table)
        return None if change.table == table else schema
    if isinstance(change, DropTable):
        return None if change.table == table else schema
    if change.table != table or isinstance(change, TruncateTable | PartitionRowsChanged):
        return schema
    if schema is None:
        raise SchemaEvolutionError(f"{change} changes {table}, whose schema is unknown")
    if isinstance(change, AlterTableCollation):
        return replace(schema, collation=change.collation)
    if isinstance(change, AlterPrimaryKey):
        for key in change.primary_key:
            schema.column(key)  # a key of columns the table has
        return replace(schema, primary_key=change.primary_key)
    names = [c.name.lower() for c in schema.columns]
    columns = list(schema.columns)
    keys = list(schema.primary_key)
    if isinstance(change, AddColumn):
        if change.column.name.lower() in names:
            raise SchemaEvolutionError(f"{table} already has a column `{change.column.name}`")
        at = len(columns)
        if change.position == "first":
            at = 0
        elif change.position == "after" and change.after is not None:
            at = _index(table, names, change.after) + 1
        columns.insert(at, change.column)
    elif isinstance(change, DropColumn):
        del columns[_index(table, names, change.name)]
        keys = [k for k in keys if k.lower() != change.name.lower()]
    elif isinstance(change, RenameColumn):
        i = _index(table, names, change.old_name)
        columns[i] = replace(columns[i], name=change.new_name)
        keys = [change.new_name if k.lower() == change.old_name.lower() else k for k in keys]
    elif isinstance(change, AlterColumnDefault):
        columns[_index(table, names, change.column.name)] = change.column
    elif isinstance(change, AlterColumnType):
        at = _index(table, names, change.column.name)
        if change.position == "keep":
            columns[at] = change.column
        else:
            del columns[at], names[at]
            to = 0 if change.position == "first" else _index(table, names, change.after or "") + 1
            columns.insert(to, change.column)
    return replace(schema, columns=tuple(columns), primary_key=tuple(keys))


def tables_changed(change: SchemaChange) -> tuple[TableId, ...]:
    """The tables whose schema ``change`` touches (both names of a rename)."""
    if isinstance(change, RenameTable):
        return (change.table, change.new_table)
    return (change.table,)


def _index(table: TableId, names: list[str], name: str) -> int:
    try:
        return names.index(name.lower())
    except ValueError:
        raise SchemaEvolutionError(f"{table} has no column `{name}` (columns: {', '.join(names)})") from None
