"""What a source schema change does to the sink, per ``pipeline.schema_change_behavior``.

Flink CDC's meanings:

- ``exception``: any change but a new table fails the stream.
- ``evolve``: the sink makes the same change; if it refuses (Iceberg cannot), the stream fails.
- ``try_evolve``: as evolve, but a refusal is recorded and the stream goes on; rows are then
  mapped to the sink's schema as it is.
- ``lenient`` (default): nothing is lost and nothing breaks readers. A dropped column stays in the
  sink (null from then on, so made optional); a renamed column is added under its new name (the
  old one stays, null from then on); a type change is applied where Iceberg widens safely (int →
  long, float → double, decimal precision up), else the values go to a new column
  ``<name>__<type>``; a truncate or a dropped table is logged and not applied; new tables and
  renamed tables are applied.
- ``ignore``: the sink schema never changes (not even new tables); rows are mapped to it (a
  column they no longer fill is made optional: ``loosened``).

Rows always reach the sink through ``schema.projection.project``: by column name, a column the
sink lacks is dropped, a column the source lacks is null.
"""

from __future__ import annotations

from dataclasses import replace

from binlake.errors import BinlakeError
from binlake.events import (
    AddColumn,
    AlterColumnDefault,
    AlterColumnType,
    AlterPrimaryKey,
    AlterTableCollation,
    Column,
    CreateTable,
    DropColumn,
    DropTable,
    LoosenColumn,
    PartitionRowsChanged,
    RenameColumn,
    RenameTable,
    SchemaChange,
    TruncateTable,
)
from binlake.schema.routes import merged_creation


class SchemaChangeRefusedError(BinlakeError):
    """The pipeline's behaviour does not allow this schema change."""


def sink_changes(
    change: SchemaChange,
    behavior: str,
    safe_widening: bool,
    source_after: CreateTable | None,
    routed: bool = False,
) -> list[SchemaChange]:
    """The changes to make to the sink for ``change``.

    Args:
        change: the source's change.
        behavior: ``pipeline.schema_change_behavior``.
        safe_widening: whether Iceberg can make an ``AlterColumnType`` change in place.
        source_after: the source table's schema after the change (column types of renames).
        routed: the sink table is shared by routed sources (``schema/routes.py``): changes that would
            take data from the other sources are made leniently, a source's own renames are not
            applied to the shared table, and its TRUNCATE or DROP (``evolve``) removes its own rows.

    Raises:
        SchemaChangeRefusedError: behaviour ``exception`` and a change other than a new table.
    """
    if isinstance(change, AlterPrimaryKey):
        return _key_change(change, behavior, routed)
    if isinstance(change, AlterColumnDefault | AlterTableCollation):
        return []  # defaults and a table's default collation are not part of the sink's schema
    if behavior == "ignore":
        return loosened(change, safe_widening)
    if isinstance(change, PartitionRowsChanged) and behavior != "exception":
        # Rows the server changed without row events: no schema change; under (try_)evolve the
        # stream heals the table by a backfill (stream/server_filled.py), lenient keeps the rows.
        return []
    if behavior == "exception":
        if isinstance(change, CreateTable):
            return [change]
        raise SchemaChangeRefusedError(
            "`pipeline.schema_change_behavior` is `exception`, which fails on every schema change but "
            "a new table"
        )
    if routed:
        if isinstance(change, CreateTable):
            return merged_creation(change)
        if isinstance(change, RenameTable):
            return []
        if isinstance(change, TruncateTable | DropTable) and behavior in ("evolve", "try_evolve"):
            # The source's own rows leave the shared table (``_source_table``), the others' stay.
            return [TruncateTable(change.table, change.statement_time)]
    elif behavior in ("evolve", "try_evolve"):
        return [change]
    return _lenient(change, safe_widening, source_after)


def _key_change(change: AlterPrimaryKey, behavior: str, routed: bool) -> list[SchemaChange]:
    """A new primary key is how the sink's rows are merged from here on, whatever the behaviour
    (under ``ignore`` too: merging on the old key, no longer unique, would go wrong)."""
    if behavior == "exception":
        raise SchemaChangeRefusedError(
            "`pipeline.schema_change_behavior` is `exception`, which fails on every schema change but "
            "a new table"
        )
    if routed:
        raise SchemaChangeRefusedError(
            f"{change.table}'s primary key changes, but its sink table is shared by routed tables, whose "
            "rows merge on one key. Fix: give the tables the same key, or route this one elsewhere and "
            f"backfill it (`binlake backfill --table {change.table}`)"
        )
    return [change]


def _lenient(
    change: SchemaChange, safe_widening: bool, source_after: CreateTable | None
) -> list[SchemaChange]:
    # A column rows no longer fill stays, loosened (``loosened``): a NOT NULL one would refuse the nulls.
    if isinstance(change, DropColumn):
        return loosened(change)
    if isinstance(change, TruncateTable | DropTable | PartitionRowsChanged):
        return []
    if isinstance(change, RenameColumn):
        column = _column(source_after, change.new_name)
        added = [AddColumn(change.table, replace(column, nullable=True))] if column is not None else []
        return [*added, *loosened(change)]
    if isinstance(change, AlterColumnType):
        if safe_widening:
            return [change]
        column = replace(change.column, name=shadow_name(change.column), nullable=True)
        return [AddColumn(change.table, column), *loosened(change)]
    assert isinstance(change, AddColumn | CreateTable | RenameTable)
    return [change]  # an added column: the sink adds every column as optional anyway


def loosened(change: SchemaChange, safe_widening: bool = False) -> list[SchemaChange]:
    """The sink schema kept as it is, but for the column ``change`` leaves to nulls (dropped,
    renamed away, or of a type whose values may not fit it): made optional, or one the source had
    NOT NULL refuses them and stops the stream at every run."""
    if isinstance(change, DropColumn):
        return [LoosenColumn(change.table, change.name)]
    if isinstance(change, RenameColumn):
        return [LoosenColumn(change.table, change.old_name)]
    if isinstance(change, AlterColumnType) and not safe_widening:
        return [LoosenColumn(change.table, change.column.name)]
    return []


def shadow_name(column: Column) -> str:
    """Where lenient puts a column's values after a type change Iceberg cannot make."""
    return f"{column.name}__{column.data_type}"


def _column(schema: CreateTable | None, name: str) -> Column | None:
    if schema is None:
        return None
    return next((c for c in schema.columns if c.name == name), None)
