"""The metadata applier applies schema changes to the Iceberg tables (Flink CDC's MetadataApplier).

Every ``apply`` is idempotent — checked against the table's current Iceberg schema, because a
restart can replay a change that was already applied — and says whether it changed anything.
Changes Iceberg can make without touching data files (add, drop, rename, widen) are metadata-only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import singledispatchmethod
from typing import Any, Literal, Protocol

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import AlwaysTrue, EqualTo, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortDirection
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import IcebergType

from binlake.errors import BinlakeError
from binlake.events import (
    AddColumn,
    AlterColumnDefault,
    AlterColumnType,
    AlterPrimaryKey,
    AlterTableCollation,
    CreateTable,
    DropColumn,
    DropTable,
    LoosenColumn,
    RenameColumn,
    RenameTable,
    SchemaChange,
    TableId,
    TruncateTable,
)
from binlake.schema.iceberg_types import iceberg_schema, iceberg_type, identifier_columns
from binlake.schema.routes import SOURCE_TABLE_COLUMN
from binlake.sink.column_fill import existing_rows_scalar, fill_column, fill_pending
from binlake.sink.layout import TableLayout, evolve, partition_spec, sort_order
from binlake.sink.type_promotions import promotion_refused

log = logging.getLogger(__name__)

Outcome = Literal["applied", "no-op"]

#: Table property holding the id of the last truncate applied, so a replayed truncate is a no-op.
TRUNCATE_ID = "binlake.truncate-id"
#: The binlog position (``offset#seq``) of the CREATE TABLE that made the sink table, if any.
CREATED_ID = "binlake.created-id"
#: Defaults binlake sets on every table it creates (commits are never retried blindly: binlake
#: refreshes, re-checks what was committed and only then retries).
DEFAULT_PROPERTIES = {
    "format-version": "2",
    "commit.retry.num-retries": "0",
    "write.parquet.compression-codec": "zstd",
    # Old metadata files go with the commits that replace them (data files: `binlake maintain`).
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}
#: What a keyed table gets unless its layout names a merge mode: a batch's cost follows its changes
#: (position deletes, the key index, in-stream compaction), not the table's size; copy-on-write
#: rewrites every file a batch touches, all of them once updates are spread over the table.
#: Files of 128 MiB (Iceberg's default is 512; Paimon's primary-key tables' 128): a file whose rows
#: are mostly deleted is rewritten whole, in the stream's time.
KEYED_DEFAULTS = {"write.merge.mode": "merge-on-read", "write.target-file-size-bytes": str(128 << 20)}


class UnsupportedSchemaChangeError(BinlakeError):
    """The sink cannot make this schema change (the behaviour mode decides what happens next)."""

    def __init__(self, change: SchemaChange, reason: str) -> None:
        self.change = change
        self.reason = reason
        super().__init__(f"Cannot apply {type(change).__name__} to `{change.table}` in Iceberg: {reason}")


class Naming(Protocol):
    def __call__(self, table: TableId) -> tuple[str, str]: ...


@dataclass(frozen=True)
class ApplyResult:
    change: SchemaChange
    outcome: Outcome
    detail: str = ""


class IcebergMetadataApplier:
    """Applies ``SchemaChange`` events to tables of one Iceberg catalog.

    Args:
        catalog: the pipeline's catalog.
        naming: source table → ``(namespace, table)`` in the sink.
        layout: partitioning, sort order and properties of created tables (``sink/layout.py``):
            one for every table, or a table's own.
    """

    def __init__(
        self,
        catalog: Catalog,
        naming: Naming,
        layout: TableLayout | Callable[[TableId], TableLayout] | None = None,
    ) -> None:
        self.catalog = catalog
        self.naming = naming
        self._layout = layout or TableLayout()

    def layout(self, table: TableId) -> TableLayout:
        """``table``'s layout (one for every table, or a rule's)."""
        return self._layout if isinstance(self._layout, TableLayout) else self._layout(table)

    @staticmethod
    def supported_changes() -> frozenset[type]:
        return frozenset(
            {
                CreateTable,
                AddColumn,
                DropColumn,
                RenameColumn,
                LoosenColumn,
                AlterColumnType,
                AlterColumnDefault,
                AlterTableCollation,
                AlterPrimaryKey,
                TruncateTable,
                DropTable,
                RenameTable,
            }
        )

    def apply(self, change: SchemaChange, change_id: str | None = None) -> ApplyResult:
        """Apply one change; a change already in effect is a no-op.

        Args:
            change: the schema change.
            change_id: a unique id of this change (its binlog position), which makes a replayed
                truncate a no-op; other changes are recognised from the schema itself.

        Raises:
            UnsupportedSchemaChangeError: Iceberg cannot make the change.
        """
        result: ApplyResult = self._apply(change, change_id)
        log.info(
            "schema change %s on %s: %s %s",
            type(change).__name__,
            change.table,
            result.outcome,
            result.detail,
        )
        return result

    def can_alter(self, change: AlterColumnType) -> bool:
        """Whether the sink can make ``change`` in place (same type, or a safe widening)."""
        try:
            table = self._load(change.table)
        except NoSuchTableError:
            return False
        if not _has(table, change.column.name):
            return False
        current = table.schema().find_field(change.column.name).field_type
        wanted = iceberg_type(change.column)
        try:
            if current != wanted:
                check_promotion(change, current, wanted)
        except UnsupportedSchemaChangeError:
            return False
        return True

    def identifier(self, table: TableId) -> str:
        return ".".join(self.naming(table))

    def _load(self, table: TableId) -> Table:
        return self.catalog.load_table(self.identifier(table))

    @singledispatchmethod
    def _apply(self, change: Any, change_id: str | None) -> ApplyResult:
        raise UnsupportedSchemaChangeError(change, f"unknown change type {type(change).__name__}")

    def replaces(self, change: CreateTable, change_id: str | None) -> bool:
        """Whether ``change`` replaces the sink table of its name: a table created in the binlog
        where the sink has one was replaced on the source (CREATE OR REPLACE, or DROP + CREATE),
        its rows gone there. A creation without a binlog position (a snapshot's) or one already
        made does not."""
        identifier = self.identifier(change.table)
        if change_id is None or not self.catalog.table_exists(identifier):
            return False
        return self._load(change.table).properties.get(CREATED_ID) != change_id

    @_apply.register
    def _create(self, change: CreateTable, change_id: str | None) -> ApplyResult:
        identifier = self.identifier(change.table)
        replaced = ""
        if self.catalog.table_exists(identifier):
            if not self.replaces(change, change_id):
                return self._evolve(change, identifier)
            self.catalog.drop_table(identifier)
            replaced = " (replacing the table of that name and its rows)"
        namespace = self.naming(change.table)[0]
        self.catalog.create_namespace_if_not_exists(namespace)
        schema = iceberg_schema(change)
        layout = self.layout(change.table)
        key = list(change.primary_key)
        self.catalog.create_table(
            identifier,
            schema=schema,
            partition_spec=partition_spec(schema, layout, key),
            sort_order=sort_order(schema, layout, key),
            properties={
                **DEFAULT_PROPERTIES,
                **(KEYED_DEFAULTS if key else {}),
                **layout.properties,
                **({CREATED_ID: change_id} if change_id is not None else {}),
            },
        )
        return ApplyResult(change, "applied", f"created {identifier}{replaced}")

    def _evolve(self, change: CreateTable, identifier: str) -> ApplyResult:
        """An existing table: its partition spec and sort order brought to its layout rule."""
        table = self._load(change.table)
        done = evolve(table, self.layout(change.table), identifier_columns(table.schema()))
        if done:
            return ApplyResult(
                change, "applied", f"{identifier} exists; its layout changed: {'; '.join(done)}"
            )
        return ApplyResult(change, "no-op", f"{identifier} exists")

    @_apply.register
    def _add_column(self, change: AddColumn, change_id: str | None) -> ApplyResult:
        table = self._load(change.table)
        name = change.column.name
        value = existing_rows_scalar(change)
        if _has(table, name):
            if value is None or not fill_pending(table, name, change_id):
                return ApplyResult(change, "no-op", f"column {name} exists")
            # Another source routed into the table added it: this one's rows get their value.
            with table.transaction() as tx:
                filled = fill_column(tx, table, name, value, change.table.name, change_id)
            return ApplyResult(
                change, "applied", f"column {name} exists; {filled} rows of {change.table} filled"
            )
        with table.transaction() as tx:
            with tx.update_schema() as update:
                # Iceberg cannot add a required column to existing rows: new columns are optional.
                update.add_column(name, iceberg_type(change.column))
                if change.position == "first":
                    update.move_first(name)
                elif change.position == "after" and change.after:
                    update.move_after(name, change.after)
            # The rows the source held got a value with the column (one commit: see column_fill).
            filled = (
                fill_column(tx, table, name, value, change.table.name, change_id) if value is not None else 0
            )
        return ApplyResult(change, "applied", f"{filled} existing rows filled" if filled else "")

    @_apply.register
    def _drop_column(self, change: DropColumn, change_id: str | None) -> ApplyResult:
        table = self._load(change.table)
        if not _has(table, change.name):
            return ApplyResult(change, "no-op", f"column {change.name} is gone")
        keys = identifier_columns(table.schema())
        field_id = table.schema().find_field(change.name).field_id
        if any(f.source_id == field_id for f in table.spec().fields):
            raise UnsupportedSchemaChangeError(
                change,
                f"the sink table is partitioned by `{change.name}` (a `sink.layout` rule's partition_by, or "
                "`sink.bucket_count`); partition by other columns first (a new spec), then drop it",
            )
        if any(f.source_id == field_id for f in table.sort_order().fields):
            _sort_without(table, field_id)  # Iceberg refuses to drop a column its sort order names
        with table.update_schema() as update:
            if change.name in keys:  # the statement's AlterPrimaryKey, next, names the key it leaves
                update.set_identifier_fields(*(k for k in keys if k != change.name))
            update.delete_column(change.name)
        return ApplyResult(change, "applied")

    @_apply.register
    def _primary_key(self, change: AlterPrimaryKey, change_id: str | None) -> ApplyResult:
        table = self._load(change.table)
        keys = list(change.primary_key)
        if identifier_columns(table.schema()) == keys:
            return ApplyResult(change, "no-op", "the table is keyed so already")
        missing = [k for k in keys if not _has(table, k)]
        if missing:
            raise UnsupportedSchemaChangeError(change, f"the sink table has no column `{missing[0]}`")
        old_key = {table.schema().find_field(k).field_id for k in identifier_columns(table.schema())}
        if any(
            isinstance(f.transform, BucketTransform) and f.source_id in old_key for f in table.spec().fields
        ):
            raise UnsupportedSchemaChangeError(
                change, "the sink table is partitioned by its old key (`sink.bucket_count`), so rows of one "
                "new key could sit in two partitions; re-snapshot the table, or leave it unbucketed",
            )  # fmt: skip
        # The server made the key's columns NOT NULL and holds no NULL in them: Iceberg's identifier
        # fields must be required columns.
        with table.update_schema(allow_incompatible_changes=True) as update:
            for key in keys:
                if not table.schema().find_field(key).required:
                    update.update_column(key, required=True)
            update.set_identifier_fields(*keys)
        # A table left without a key keeps its files' order (pyiceberg sets no empty one); one
        # sorted by its layout's sort_by keeps that.
        if keys and not self.layout(change.table).sort_by:
            with table.update_sort_order() as order:
                for key in keys:
                    order.asc(key, IdentityTransform())
        merged = f"merged on ({', '.join(keys)})" if keys else "a table without a key"
        return ApplyResult(change, "applied", f"{merged} from here on")

    @_apply.register
    def _rename_column(self, change: RenameColumn, change_id: str | None) -> ApplyResult:
        table = self._load(change.table)
        if not _has(table, change.old_name) and _has(table, change.new_name):
            return ApplyResult(change, "no-op", f"column {change.new_name} exists")
        if not _has(table, change.old_name):
            raise UnsupportedSchemaChangeError(change, f"there is no column `{change.old_name}` to rename")
        with table.update_schema() as update:
            update.rename_column(change.old_name, change.new_name)
        return ApplyResult(change, "applied")

    @_apply.register
    def _loosen(self, change: LoosenColumn, change_id: str | None) -> ApplyResult:
        table = self._load(change.table)
        if not _has(table, change.name):
            return ApplyResult(change, "no-op", f"there is no column `{change.name}`")
        if not table.schema().find_field(change.name).required or change.name in _identifier_names(table):
            return ApplyResult(change, "no-op", f"{change.name} takes nulls already, or is a key column")
        with table.update_schema() as update:
            update.update_column(change.name, required=False)
        return ApplyResult(change, "applied", f"{change.name} made optional")

    @_apply.register
    def _alter_type(self, change: AlterColumnType, change_id: str | None) -> ApplyResult:
        table = self._load(change.table)
        name = change.column.name
        if not _has(table, name):
            raise UnsupportedSchemaChangeError(change, f"there is no column `{name}`")
        current = table.schema().find_field(name)
        wanted = iceberg_type(change.column)
        loosen = change.column.nullable and current.required and name not in _identifier_names(table)
        move = change.position != "keep" and not _in_place(table, change)
        if current.field_type == wanted and not loosen and not move:
            return ApplyResult(change, "no-op", f"{name} is already {wanted}")
        if current.field_type != wanted:
            check_promotion(change, current.field_type, wanted)
        with table.update_schema() as update:
            if current.field_type != wanted or loosen:
                update.update_column(
                    name,
                    field_type=wanted if current.field_type != wanted else None,
                    required=False if loosen else None,
                )
            if move and change.position == "first":
                update.move_first(name)
            elif move and change.after:
                update.move_after(name, change.after)
        return ApplyResult(change, "applied", f"{current.field_type} → {wanted}")

    @_apply.register
    def _table_collation(self, change: AlterTableCollation, change_id: str | None) -> ApplyResult:
        return ApplyResult(change, "no-op", "a default collation is not part of an Iceberg schema")

    @_apply.register
    def _column_default(self, change: AlterColumnDefault, change_id: str | None) -> ApplyResult:
        return ApplyResult(change, "no-op", "binlake keeps source defaults in its schema history")

    @_apply.register
    def _truncate(self, change: TruncateTable, change_id: str | None) -> ApplyResult:
        table = self._load(change.table)
        if change_id is not None and table.properties.get(TRUNCATE_ID) == change_id:
            return ApplyResult(change, "no-op", f"truncate {change_id} was applied")
        # Routed sources share the table: the source's own rows go, the others' stay.
        shared = SOURCE_TABLE_COLUMN in table.schema().column_names
        with table.transaction() as tx:
            if table.current_snapshot() is not None:
                tx.delete(
                    EqualTo(term=Reference(SOURCE_TABLE_COLUMN), value=literal(change.table.name))
                    if shared
                    else AlwaysTrue()
                )
            if change_id is not None:
                tx.set_properties({TRUNCATE_ID: change_id})
        return ApplyResult(change, "applied", f"the rows of {change.table}" if shared else "")

    @_apply.register
    def _drop_table(self, change: DropTable, change_id: str | None) -> ApplyResult:
        identifier = self.identifier(change.table)
        try:
            self.catalog.drop_table(identifier)
        except NoSuchTableError:
            return ApplyResult(change, "no-op", f"{identifier} is gone")
        return ApplyResult(change, "applied")

    @_apply.register
    def _rename_table(self, change: RenameTable, change_id: str | None) -> ApplyResult:
        old, new = self.identifier(change.table), self.identifier(change.new_table)
        if not self.catalog.table_exists(old) and self.catalog.table_exists(new):
            return ApplyResult(change, "no-op", f"{new} exists")
        self.catalog.create_namespace_if_not_exists(self.naming(change.new_table)[0])
        self.catalog.rename_table(old, new)
        return ApplyResult(change, "applied")


def _in_place(table: Table, change: AlterColumnType) -> bool:
    """Whether the column already sits where ``change`` moves it (a replayed move is a no-op)."""
    names = [f.name for f in table.schema().fields]
    at = names.index(change.column.name)
    if change.position == "first":
        return at == 0
    return at > 0 and names[at - 1] == change.after


def _sort_without(table: Table, field_id: int) -> None:
    """``table`` sorted as it is, less the column ``field_id`` (a drop of it comes next)."""
    schema = table.schema()
    with table.update_sort_order() as order:
        for f in table.sort_order().fields:
            if f.source_id != field_id:
                add = order.asc if f.direction == SortDirection.ASC else order.desc
                add(schema.find_column_name(f.source_id) or "", f.transform, f.null_order)


def _has(table: Table, name: str) -> bool:
    return name in {f.name for f in table.schema().fields}


def _identifier_names(table: Table) -> set[str]:
    return set(identifier_columns(table.schema()))


def check_promotion(change: SchemaChange, current: IcebergType, wanted: IcebergType) -> None:
    """Raise for ``change`` unless ``current`` → ``wanted`` is a safe promotion (``type_promotions``)."""
    refused = promotion_refused(current, wanted)
    if refused is not None:
        raise UnsupportedSchemaChangeError(change, refused)
