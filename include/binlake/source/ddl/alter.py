"""The server's ALTER TABLE algorithm, run on the schema binlake holds.

The server resolves all of a statement's actions against the table as it was (``CHANGE``,
``MODIFY`` and ``DROP`` name old columns, ``FIRST``/``AFTER`` place columns in the new list,
positioned columns go in after the others: MySQL's ``mysql_prepare_alter_table``). ``resolve``
does the same with what the parser read (an ``AlterPlan``); ``differences`` then states the new
table as changes the sink can make one by one: drops, renames, each column in its new order
(added, moved or retyped), then the table's default collation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from binlake.events import (
    AddColumn,
    AlterColumnDefault,
    AlterColumnType,
    AlterTableCollation,
    Column,
    CreateTable,
    DropColumn,
    RenameColumn,
    SchemaChange,
    TableId,
)
from binlake.source.ddl.column_defaults import default_text
from binlake.source.ddl.columns import ColumnDef
from binlake.source.ddl.tokens import UnparsedDdlError


@dataclass
class Slot:
    """A column of the table an ALTER builds, and which old column it comes from."""

    column: Column
    origin: str | None
    """The old column's name (lower case), None for a new column."""


@dataclass
class AlterPlan:
    """What one ALTER TABLE statement asks for, before the server's algorithm resolves it."""

    drops: dict[str, bool] = field(default_factory=dict)
    """old column (lower case) → IF EXISTS"""
    definitions: list[tuple[str | None, ColumnDef, tuple[str, str | None] | None, bool]] = field(
        default_factory=list
    )
    """(old name or None for ADD, definition, position, IF [NOT] EXISTS), in text order"""
    defaults: dict[str, tuple[str, object] | None] = field(default_factory=dict)
    """ALTER COLUMN c SET DEFAULT v / DROP DEFAULT: old column → the value (None: dropped)"""
    renames: list[tuple[str, str, bool]] = field(default_factory=list)
    """RENAME COLUMN old TO new: (old lower case, new, IF EXISTS)"""
    collation: str | None = None
    convert: tuple[str, str] | None = None
    new_name: TableId | None = None
    drop_key: bool = False
    """DROP PRIMARY KEY"""
    new_key: list[str] | None = None
    """The columns of a primary key the statement adds (``ADD PRIMARY KEY``, a column's ``PRIMARY KEY``)"""
    rows_changed: list[tuple[TableId, str]] = field(default_factory=list)
    """Partition maintenance that changes rows without row events: (table, action)"""
    unique_added: bool = False
    """A UNIQUE or PRIMARY key added: under ``ALTER IGNORE`` the server deletes the rows it finds
    duplicated, without row events"""


def resolve(current: CreateTable, plan: AlterPlan) -> tuple[CreateTable, list[str | None], set[str]]:
    """The table after ``plan`` as the server builds it (MySQL's ``mysql_prepare_alter_table``),
    where each of its columns comes from (an old column's lower-case name, None: added), and the
    old columns the statement placed (FIRST/AFTER)."""
    old_names = {c.name.lower() for c in current.columns}
    for name, if_exists in plan.drops.items():
        if name not in old_names and not if_exists:
            raise UnparsedDdlError(f"DROP COLUMN `{name}`: {current.table} has no such column")
    in_place: dict[str, Column] = {}
    moved: set[str] = set()
    for old, definition, position, if_flag in plan.definitions:
        if old is not None and old not in old_names and not if_flag:
            raise UnparsedDdlError(f"CHANGE/MODIFY `{old}`: {current.table} has no such column")
        if old is not None and old in old_names:
            if position is None:
                in_place[old] = definition.column
            else:
                moved.add(old)
    for old, _new, if_exists in plan.renames:
        if old not in old_names and not if_exists:
            raise UnparsedDdlError(f"RENAME COLUMN `{old}`: {current.table} has no such column")
    renames = {old: new for old, new, _ in plan.renames}
    slots: list[Slot] = []
    for column in current.columns:
        key = column.name.lower()
        if key in plan.drops or key in moved:
            continue
        if key in in_place:
            slots.append(Slot(in_place[key], key))
            continue
        column = _with_default(column, plan.defaults, key)
        if key in renames:
            column = replace(column, name=renames[key])
        if plan.convert is not None:
            column = _converted(column, plan.convert)
        slots.append(Slot(column, key))
    for old, definition, position, if_flag in plan.definitions:  # the rest, in text order
        if old is None:
            name = definition.column.name.lower()
            if any(s.column.name.lower() == name for s in slots):
                if if_flag:
                    continue  # ADD COLUMN IF NOT EXISTS of a column that exists
                # The server refuses a duplicate column: the schema binlake holds is out of step.
                added = definition.column.name
                raise UnparsedDdlError(f"ADD COLUMN `{added}`: {current.table} has it already")
            _place(slots, Slot(definition.column, None), position, current.table)
        elif old in old_names and position is not None and old not in plan.drops:
            _place(slots, Slot(definition.column, old), position, current.table)
    keys = _new_key(current, slots, plan)
    columns = tuple(_keyed(s.column) if s.column.name in keys else s.column for s in slots)
    after = CreateTable(
        current.table, columns, tuple(keys), current.comment, plan.collation or current.collation
    )
    return after, [s.origin for s in slots], moved


def _place(slots: list[Slot], slot: Slot, position: tuple[str, str | None] | None, table: TableId) -> None:
    if position is None:
        slots.append(slot)
    elif position[0] == "first":
        slots.insert(0, slot)
    else:
        names = [s.column.name.lower() for s in slots]
        target = (position[1] or "").lower()
        if target not in names:
            raise UnparsedDdlError(f"AFTER `{position[1]}`: {table} has no such column")
        slots.insert(names.index(target) + 1, slot)


def _keys(current: CreateTable, slots: list[Slot]) -> list[str]:
    """The primary key after the ALTER: a dropped column leaves the key, a renamed one is renamed."""
    by_origin = {s.origin: s.column.name for s in slots if s.origin is not None}
    return [by_origin[k.lower()] for k in current.primary_key if k.lower() in by_origin]


def _new_key(current: CreateTable, slots: list[Slot], plan: AlterPlan) -> list[str]:
    """The primary key after the ALTER: the old one carried (``_keys``) unless dropped, and the one
    the statement adds (its columns named as the table's columns are, after the statement)."""
    keys = [] if plan.drop_key else _keys(current, slots)
    if plan.new_key is None:
        return keys
    if keys:  # the server refuses it ("Multiple primary key defined"): binlake's schema is out of step
        raise UnparsedDdlError(f"ADD PRIMARY KEY: {current.table} has a primary key already")
    names = {s.column.name.lower(): s.column.name for s in slots}
    missing = [k for k in plan.new_key if k.lower() not in names]
    if missing:
        raise UnparsedDdlError(f"ADD PRIMARY KEY: {current.table} has no column `{missing[0]}`")
    return [names[k.lower()] for k in plan.new_key]


def _keyed(column: Column) -> Column:
    """A key column: NOT NULL, so a NULL default (a nullable column's) is no default any more."""
    if not column.nullable:
        return column
    default = None if (column.default or "").upper() == "NULL" else column.default
    return replace(column, nullable=False, default=default)


def key_changed(current: CreateTable, after: CreateTable, origins: list[str | None]) -> bool:
    """Whether the statement changed the primary key (more than renaming its columns)."""
    by_origin = {o: c.name for o, c in zip(origins, after.columns, strict=True) if o is not None}
    return tuple(by_origin.get(k.lower()) for k in current.primary_key) != after.primary_key


def _with_default(column: Column, defaults: dict[str, tuple[str, object] | None], key: str) -> Column:
    if key not in defaults:
        return column
    return replace(column, default=default_text(column, defaults[key]))


def _converted(column: Column, to: tuple[str, str]) -> Column:
    """A column after ``CONVERT TO CHARACTER SET`` (binary columns stay as they are)."""
    if column.collation is None or column.data_type == "json":
        return column
    return replace(column, charset=to[0], collation=to[1])


def differences(
    before: CreateTable, after: CreateTable, origins: list[str | None], placed: set[str]
) -> list[SchemaChange]:
    """``after`` as changes the sink makes one by one from ``before`` (drops, renames, then each
    column in its new order: added, moved or redefined; then the default collation)."""
    table = before.table
    changes: list[SchemaChange] = []
    new_by_origin = {o: c for o, c in zip(origins, after.columns, strict=True) if o is not None}
    for column in before.columns:
        if column.name.lower() not in new_by_origin:
            changes.append(DropColumn(table, column.name))
    working = [c.name for c in before.columns if c.name.lower() in new_by_origin]
    for old, new in new_by_origin.items():
        old_name = next(c.name for c in before.columns if c.name.lower() == old)
        if new.name != old_name:
            changes.append(RenameColumn(table, old_name, new.name))
            working[working.index(old_name)] = new.name
    origin_of = {c.name: o for o, c in new_by_origin.items()}
    old_index = {c.name.lower(): i for i, c in enumerate(before.columns)}
    steady = _steady(
        [
            old_index[origin_of[c.name]] if c.name in origin_of and origin_of[c.name] not in placed else None
            for c in after.columns
        ]
    )
    previous: str | None = None
    for i, column in enumerate(after.columns):
        origin = origin_of.get(column.name)
        if origin is None:
            changes.append(_add(table, column, previous, working))
        else:
            old_column = before.columns[old_index[origin]]
            moved = i not in steady
            if moved:
                working.remove(column.name)
                working.insert(0 if previous is None else working.index(previous) + 1, column.name)
            if moved:
                where = ("first", None) if previous is None else ("after", previous)
                changes.append(AlterColumnType(table, column, *where))
            elif _redefined(old_column, column):
                changes.append(AlterColumnType(table, column))
            elif old_column != replace(column, name=old_column.name):
                changes.append(AlterColumnDefault(table, column))
        previous = column.name
    if after.collation != before.collation and after.collation is not None:
        changes.append(AlterTableCollation(table, after.collation))
    return changes


def _add(table: TableId, column: Column, previous: str | None, working: list[str]) -> AddColumn:
    if previous is None:
        working.insert(0, column.name)
        return AddColumn(table, column, "first")
    at = working.index(previous) + 1
    working.insert(at, column.name)
    if at == len(working) - 1:
        return AddColumn(table, column)
    return AddColumn(table, column, "after", previous)


def _steady(old_positions: list[int | None]) -> set[int]:
    """Indexes (in the new order) of the carried columns that need not move: a longest run of
    carried columns whose old positions increase (the rest are moved into place)."""
    runs: list[tuple[int, list[int]]] = []  # (old position of the run's last column, indexes)
    for i, position in enumerate(old_positions):
        if position is None:
            continue
        longest: list[int] = []
        for last, run in runs:
            if last < position and len(run) > len(longest):
                longest = run
        runs.append((position, [*longest, i]))
    best: list[int] = []
    for _, run in runs:
        best = run if len(run) > len(best) else best
    return set(best)


def _redefined(a: Column, b: Column) -> bool:
    """Whether more than the default (or AUTO_INCREMENT) differs."""
    return replace(a, name=b.name, default=None, auto_increment=False) != replace(
        b, default=None, auto_increment=False
    )
