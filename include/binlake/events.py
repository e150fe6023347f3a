"""binlake's change events: a small closed set of frozen dataclasses.

``SchemaChange`` is the union of table-level changes (Flink CDC's SchemaChangeEvent family);
``DataChange`` is one row change. Library events (python-mysql-replication's) are converted into
these at once, in ``source/binlog/change_reader.py`` (and ``scan.py``), so nothing else depends on
the library's shapes.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from binlake.offsets import BinlogOffset

Operation = Literal["insert", "update", "delete"]


@dataclass(frozen=True, order=True)
class TableId:
    """A source table: database and table name."""

    database: str
    table: str

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    @classmethod
    def parse(cls, name: str) -> TableId:
        database, sep, table = name.partition(".")
        if not sep or not database or not table:
            raise ValueError(f"`{name}` is not `database.table`")
        return cls(database, table)

    def quoted(self) -> str:
        return f"{quote(self.database)}.{quote(self.table)}"

    def __str__(self) -> str:
        return self.name


def quote(identifier: str) -> str:
    """Quote a MySQL identifier (backquotes doubled inside)."""
    return "`" + identifier.replace("`", "``") + "`"


@dataclass(frozen=True)
class Column:
    """A source column with its full MySQL type.

    Attributes:
        data_type: the base type, lower case (``bigint``, ``varchar``, ``enum``, ``json``).
        column_type: the full type as the server shows it (``bigint(20) unsigned``).
        precision: numeric precision (DECIMAL, integers) or None.
        scale: numeric scale (DECIMAL) or None.
        fsp: fractional seconds precision (DATETIME, TIMESTAMP, TIME) or None.
        length: maximum length in characters (CHAR, VARCHAR, TEXT) or bytes (BINARY…).
        values: the members of an ENUM or SET, in definition order.
    """

    name: str
    data_type: str
    column_type: str
    nullable: bool = True
    unsigned: bool = False
    precision: int | None = None
    scale: int | None = None
    fsp: int | None = None
    length: int | None = None
    charset: str | None = None
    collation: str | None = None
    values: tuple[str, ...] = ()
    default: str | None = None
    auto_increment: bool = False
    generated: bool = False
    """A generated column (``AS (expr) VIRTUAL|STORED``): the server computes its values."""

    @property
    def is_integral(self) -> bool:
        return self.data_type in ("tinyint", "smallint", "mediumint", "int", "bigint")

    @property
    def is_text(self) -> bool:
        return self.collation is not None


@dataclass(frozen=True)
class CreateTable:
    """A table and its schema: discovered at plan time, or created in the binlog."""

    table: TableId
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    comment: str | None = None
    collation: str | None = None
    """The table's default collation (what a new text column gets when its DDL names none)."""

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"`{self.table}` has no column `{name}` (columns: {', '.join(self.column_names)})")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


@dataclass(frozen=True)
class AddColumn:
    table: TableId
    column: Column
    position: Literal["first", "after", "last"] = "last"
    after: str | None = None
    statement_time: int | None = None
    """When the source's ``ADD COLUMN`` ran (epoch seconds), which fills the rows the table held
    (``schema.defaults.existing_rows_value``); None for a column binlake adds itself (lenient's),
    which existing rows hold NULL in."""
    statement_micros: int | None = None
    """The fraction of that time (microseconds), where the server wrote it in the event."""
    statement_local: dt.datetime | None = None
    """That time (whole seconds) in the statement's session time zone, as the server converts it
    (what ``NOW()`` gave a DATETIME); None where the event named no time zone."""

    @property
    def clock(self) -> StatementClock | None:
        """When the statement ran, as its current-time functions saw it (None: binlake's own column)."""
        if self.statement_time is None:
            return None
        return StatementClock(self.statement_time, self.statement_micros, self.statement_local)


@dataclass(frozen=True)
class StatementClock:
    """The current time of a statement: what ``CURRENT_TIMESTAMP`` and ``CURDATE()`` read."""

    epoch: int
    """Seconds since the epoch (the query event's timestamp)."""
    micros: int | None = None
    """Its fraction, where the event holds it (MariaDB's ``Q_HRNOW``, MySQL's ``Q_MICROSECONDS``)."""
    local: dt.datetime | None = None
    """The epoch second as wall-clock time in the session's time zone, where known."""


@dataclass(frozen=True)
class DropColumn:
    table: TableId
    name: str


@dataclass(frozen=True)
class RenameColumn:
    table: TableId
    old_name: str
    new_name: str


@dataclass(frozen=True)
class LoosenColumn:
    """The sink keeps a column that rows no longer fill (``lenient``: dropped, renamed away, or
    its values moved to a new column): it takes nulls from here on. A sink change only: no
    statement makes it."""

    table: TableId
    name: str


@dataclass(frozen=True)
class AlterColumnType:
    """A column's new definition (``MODIFY``/``CHANGE``), and where it moves to, if it moves."""

    table: TableId
    column: Column
    position: Literal["keep", "first", "after"] = "keep"
    after: str | None = None


@dataclass(frozen=True)
class AlterColumnDefault:
    """A column's default (or AUTO_INCREMENT) changes, nothing else: the sink has nothing to do;
    the schema history needs it (the server fills defaults without row events)."""

    table: TableId
    column: Column


@dataclass(frozen=True)
class PartitionRowsChanged:
    """Partition maintenance that removes or swaps rows without row events (``DROP``/``TRUNCATE``
    /``EXCHANGE PARTITION``): no column changes, but the table's rows do, and the binlog does not
    say which."""

    table: TableId
    action: str
    """What the statement did, e.g. ``DROP PARTITION``."""


@dataclass(frozen=True)
class AlterTableCollation:
    """A table's default collation changes: what later text columns get when their DDL names none.

    No column changes (``CONVERT TO CHARACTER SET`` comes as one ``AlterColumnType`` per column),
    so the sink has nothing to do; the schema history needs it to read later DDL right.
    """

    table: TableId
    collation: str


@dataclass(frozen=True)
class AlterPrimaryKey:
    """A table's primary key changes (ADD / DROP PRIMARY KEY, a key column's definition): from the
    statement on, its changes merge on the new key — which the server guarantees unique — and the
    sink table's identifier fields follow. ``primary_key`` empty: the table has none now."""

    table: TableId
    primary_key: tuple[str, ...]


@dataclass(frozen=True)
class TruncateTable:
    table: TableId
    statement_time: int | None = field(default=None, compare=False)
    """When the statement ran (its binlog event's time, epoch seconds): when the rows it removes
    left the source (a changelog's ``-D``, a history's closed versions, soft-deleted rows)."""


@dataclass(frozen=True)
class DropTable:
    table: TableId
    statement_time: int | None = field(default=None, compare=False)
    """When the statement ran, as ``TruncateTable``'s."""


@dataclass(frozen=True)
class RenameTable:
    table: TableId
    new_table: TableId


SchemaChange = (
    CreateTable
    | AddColumn
    | DropColumn
    | RenameColumn
    | LoosenColumn
    | AlterColumnType
    | AlterColumnDefault
    | AlterTableCollation
    | AlterPrimaryKey
    | PartitionRowsChanged
    | TruncateTable
    | DropTable
    | RenameTable
)


@dataclass(frozen=True)
class DataChange:
    """One row change at a binlog offset; ``before``/``after`` are column → value (None if absent)."""

    table: TableId
    op: Operation
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    offset: BinlogOffset
    timestamp: int = 0
    """Event time, epoch seconds (the binlog's resolution)."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def insert(
        cls, table: TableId, after: dict[str, Any], offset: BinlogOffset, timestamp: int = 0
    ) -> DataChange:
        return cls(table, "insert", None, after, offset, timestamp)

    @classmethod
    def update(
        cls,
        table: TableId,
        before: dict[str, Any],
        after: dict[str, Any],
        offset: BinlogOffset,
        timestamp: int = 0,
    ) -> DataChange:
        return cls(table, "update", before, after, offset, timestamp)

    @classmethod
    def delete(
        cls, table: TableId, before: dict[str, Any], offset: BinlogOffset, timestamp: int = 0
    ) -> DataChange:
        return cls(table, "delete", before, None, offset, timestamp)


def table_to_dict(table: CreateTable) -> dict[str, Any]:
    """A table schema as plain JSON-able data (for Spark options and the schema history)."""
    data: dict[str, Any] = _adapter(CreateTable).dump_python(table, mode="json")
    return data


def table_from_dict(data: dict[str, Any]) -> CreateTable:
    table: CreateTable = _adapter(CreateTable).validate_python(data)
    return table


_CHANGE_KINDS: dict[str, type] = {
    "create_table": CreateTable,
    "add_column": AddColumn,
    "drop_column": DropColumn,
    "rename_column": RenameColumn,
    "loosen_column": LoosenColumn,
    "alter_column_type": AlterColumnType,
    "alter_column_default": AlterColumnDefault,
    "alter_table_collation": AlterTableCollation,
    "alter_primary_key": AlterPrimaryKey,
    "partition_rows_changed": PartitionRowsChanged,
    "truncate_table": TruncateTable,
    "drop_table": DropTable,
    "rename_table": RenameTable,
}


def change_to_dict(change: SchemaChange) -> dict[str, Any]:
    """A schema change as plain JSON-able data, its class named by ``kind`` (for the state store
    and Airflow's XCom)."""
    kind = next(k for k, cls in _CHANGE_KINDS.items() if isinstance(change, cls))
    return {"kind": kind, **_adapter(_CHANGE_KINDS[kind]).dump_python(change, mode="json")}


def change_from_dict(data: dict[str, Any]) -> SchemaChange:
    change: SchemaChange = _adapter(_CHANGE_KINDS[data["kind"]]).validate_python(data)
    return change


@functools.cache
def _adapter(kind: type) -> TypeAdapter[Any]:
    """pydantic's (de)serialiser of a change class: built once, it costs milliseconds."""
    return TypeAdapter(kind)


def describe_change(change: SchemaChange) -> str:
    """One line for logs, status and the Airflow UI."""
    if isinstance(change, CreateTable):
        return f"create table {change.table} ({', '.join(change.column_names)})"
    if isinstance(change, AddColumn):
        where = {"first": " first", "after": f" after `{change.after}`"}.get(change.position, "")
        return f"add column `{change.column.name}` {change.column.column_type} to {change.table}{where}"
    if isinstance(change, DropColumn):
        return f"drop column `{change.name}` of {change.table}"
    if isinstance(change, RenameColumn):
        return f"rename column `{change.old_name}` of {change.table} to `{change.new_name}`"
    if isinstance(change, LoosenColumn):
        return f"keep column `{change.name}` of {change.table}, null from here on"
    if isinstance(change, AlterColumnType):
        moves = {"first": " and move it first", "after": f" and move it after `{change.after}`"}
        return (
            f"change column `{change.column.name}` of {change.table} to {change.column.column_type}"
            + moves.get(change.position, "")
        )
    if isinstance(change, AlterColumnDefault):
        column = change.column
        return f"change the default of column `{column.name}` of {change.table} to {column.default}"
    if isinstance(change, PartitionRowsChanged):
        return f"{change.action} of {change.table} (rows change without row events)"
    if isinstance(change, AlterTableCollation):
        return f"change the default collation of {change.table} to {change.collation}"
    if isinstance(change, AlterPrimaryKey):
        key = ", ".join(f"`{k}`" for k in change.primary_key)
        return (
            f"change the primary key of {change.table} to ({key})"
            if key
            else f"drop the primary key of {change.table}"
        )
    if isinstance(change, TruncateTable):
        return f"truncate {change.table}"
    if isinstance(change, DropTable):
        return f"drop table {change.table}"
    return f"rename table {change.table} to {change.new_table}"
