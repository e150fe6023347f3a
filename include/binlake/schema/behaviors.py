"""What a source schema change does to the sink, per ``pipeline.schema_change_behavior``.

Flink CDC's meanings:

- ``exception``: any change but a new table fails the stream.
- ``evolve``: the sink makes the same change; if it refuses (Iceberg cannot), the stream fails.
- ``try_evolve``: as evolve, but a refusal is recorded and the stream goes on; rows are then
  mapped to the sink's schema as it is.
- ``lenient`` (default): nothing is lost and nothing breaks readers. A dropped column stays in the
  sink (null from then on); a renamed column is added under its new name (the old one stays, null
  from then on); a type change is applied where Iceberg widens safely (int → long, float → double,
  decimal precision up), else the values go to a new column ``<name>__<type>``; a truncate or a
  dropped table is logged and not applied; new tables and renamed tables are applied.
- ``ignore``: the sink schema never changes (not even new tables); rows are mapped to it.

Rows always reach the sink through ``project``: by column name, a column the sink lacks is
dropped, a column the source lacks is null.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from binlake.errors import BinlakeError
from binlake.events import (
    AddColumn,
    AlterColumnType,
    Column,
    CreateTable,
    DropColumn,
    DropTable,
    RenameColumn,
    RenameTable,
    SchemaChange,
    TruncateTable,
)
from binlake.sink.route import merged_creation


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
        routed: the sink table is shared by routed sources (``sink/route.py``): changes that would
            take data from the other sources are made leniently, a source's own table-level
            changes are not applied to the shared table.

    Raises:
        SchemaChangeRefusedError: behaviour ``exception`` and a change other than a new table.
    """
    if behavior == "ignore":
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
    elif behavior in ("evolve", "try_evolve"):
        return [change]
    return _lenient(change, safe_widening, source_after)


def _lenient(
    change: SchemaChange, safe_widening: bool, source_after: CreateTable | None
) -> list[SchemaChange]:
    if isinstance(change, DropColumn | TruncateTable | DropTable):
        return []
    if isinstance(change, RenameColumn):
        column = _column(source_after, change.new_name)
        return [AddColumn(change.table, replace(column, nullable=True))] if column is not None else []
    if isinstance(change, AlterColumnType):
        if safe_widening:
            return [change]
        column = replace(change.column, name=shadow_name(change.column), nullable=True)
        return [AddColumn(change.table, column)]
    if isinstance(change, AddColumn):
        return [replace(change, column=replace(change.column, nullable=True))]
    assert isinstance(change, CreateTable | RenameTable)
    return [change]


def shadow_name(column: Column) -> str:
    """Where lenient puts a column's values after a type change Iceberg cannot make."""
    return f"{column.name}__{column.data_type}"


def _column(schema: CreateTable | None, name: str) -> Column | None:
    if schema is None:
        return None
    return next((c for c in schema.columns if c.name == name), None)


def project(rows: pa.Table, sink: pa.Schema) -> pa.Table:
    """Rows of the source's schema → the sink's schema, by column name.

    A sink column the rows lack, or whose type the rows' column cannot widen into safely, is null;
    a ``<name>__<type>`` column (lenient's home for an incompatible type change) takes ``name``.
    Arrays whose type already fits (``string`` for ``large_string``) pass unchanged.
    """
    by_name = {name: rows.column(name) for name in rows.column_names}
    arrays, fields = [], []
    for field in sink:
        source = by_name.get(field.name)
        if source is None and "__" in field.name:
            source = by_name.get(field.name.rsplit("__", 1)[0])
        if source is not None and _fits(source.type, field.type):
            same = _family(source.type) == _family(field.type)
            arrays.append(source if same else source.cast(field.type))
            fields.append(pa.field(field.name, source.type if same else field.type))
        else:
            arrays.append(pa.nulls(rows.num_rows, field.type))
            fields.append(pa.field(field.name, field.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _family(t: pa.DataType) -> object:
    if t in (pa.string(), pa.large_string()):
        return "string"
    if t in (pa.binary(), pa.large_binary()):
        return "binary"
    return t


def _fits(have: pa.DataType, want: pa.DataType) -> bool:
    if have == want:
        return True
    if pa.types.is_integer(have) and pa.types.is_integer(want):
        return bool(want.bit_width >= have.bit_width)
    if pa.types.is_floating(have) and pa.types.is_floating(want):
        return bool(want.bit_width >= have.bit_width)
    if pa.types.is_decimal(have) and pa.types.is_decimal(want):
        return bool(want.scale == have.scale and want.precision >= have.precision)
    if pa.types.is_timestamp(have) and pa.types.is_timestamp(want):
        return bool(have.tz == want.tz or (have.tz is None) == (want.tz is None))
    return _family(have) == _family(want) and _family(have) in ("string", "binary")
