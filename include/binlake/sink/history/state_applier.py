"""Schema changes of a table kept without an upsert table: its state table is a history or a
changelog (``sink/history/state_table.py``), which keeps the past.

The metadata applier's counterpart (``sink/metadata_applier.py``: same calls, same refusals where
Iceberg cannot make a change), with the changelog's and history's rule for columns: they gain the
columns the source adds and the types it widens, and keep those it drops (earlier rows hold
them). What a change does to rows is the stream's to record before (``stream/schema_changes.py``):
a ``TRUNCATE``'s or ``DROP``'s ``-D`` rows and closed versions, an ``ADD COLUMN … DEFAULT``'s
fill, a renamed table's companions moved; here those are no-ops.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import singledispatchmethod
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import NestedField

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
from binlake.schema.iceberg_types import iceberg_schema, iceberg_type
from binlake.schema.table_rules import TableRules
from binlake.sink.history.changelog import KEY_COLUMNS, follow_sink_columns
from binlake.sink.history.companions import ensure_companions, ensure_state_table
from binlake.sink.history.state_table import StateTable, state_table
from binlake.sink.layout import TableLayout
from binlake.sink.metadata_applier import (
    CREATED_ID,
    DEFAULT_PROPERTIES,
    ApplyResult,
    UnsupportedSchemaChangeError,
    check_promotion,
)
from binlake.sink.type_promotions import promotion_refused

log = logging.getLogger(__name__)


class StateTableApplier:
    """Applies ``SchemaChange`` events to the state tables of tables kept without an upsert table.

    Args:
        catalog: the pipeline's catalog.
        rules_of: a source table's per-table rules (``schema.table_rules.table_rules``).
        layout: a source table's layout (``sink/layout.py``): the properties a created table takes
            (its compression).
    """

    def __init__(
        self,
        catalog: Catalog,
        rules_of: Callable[[TableId], TableRules],
        layout: Callable[[TableId], TableLayout],
    ) -> None:
        self.catalog = catalog
        self.rules_of = rules_of
        self.layout = layout

    def identifier(self, table: TableId) -> str:
        return self.rules_of(table).state_name

    def apply(self, change: SchemaChange, change_id: str | None = None) -> ApplyResult:
        """Apply one change; one already in effect (a replay) is a no-op.

        Raises:
            UnsupportedSchemaChangeError: the change cannot be made (the behaviour decides).
        """
        result: ApplyResult = self._apply(change, change_id)
        log.info("schema change %s on %s: %s %s", type(change).__name__, change.table, result.outcome,
                 result.detail)  # fmt: skip
        return result

    def replaces(self, change: CreateTable, change_id: str | None) -> bool:
        """Whether ``change`` creates the table again where the sink holds it (as the metadata
        applier's ``replaces``): its rows leave the state table and the others first."""
        identifier = self.identifier(change.table)
        if change_id is None or not self.catalog.table_exists(identifier):
            return False
        return self.catalog.load_table(identifier).properties.get(CREATED_ID) != change_id

    def can_alter(self, change: AlterColumnType) -> bool:
        """Whether the state table can take ``change`` in place (same type, or a safe widening)."""
        state = self._state(change.table)
        if state is None or change.column.name not in state.table.schema().column_names:
            return False
        current, wanted = (
            state.table.schema().find_field(change.column.name).field_type,
            iceberg_type(change.column),
        )
        return current == wanted or promotion_refused(current, wanted) is None

    def _state(self, table: TableId) -> StateTable | None:
        return state_table(self.rules_of(table), self.catalog)

    def _loaded(self, change: SchemaChange) -> StateTable:
        state = self._state(change.table)
        if state is None:
            raise UnsupportedSchemaChangeError(change, f"there is no table {self.identifier(change.table)}")
        return state

    def _followed(self, change: SchemaChange, state: StateTable) -> None:
        """The tables kept beside the state table given its columns (as each stream start does)."""
        ensure_companions(self.rules_of(change.table), self.catalog, state)

    @singledispatchmethod
    def _apply(self, change: Any, change_id: str | None) -> ApplyResult:
        raise UnsupportedSchemaChangeError(change, f"unknown change type {type(change).__name__}")

    @_apply.register
    def _create(self, change: CreateTable, change_id: str | None) -> ApplyResult:
        rules = self.rules_of(change.table)
        replaced = self.replaces(change, change_id)
        existed = self.catalog.table_exists(rules.state_name)
        properties = {**DEFAULT_PROPERTIES, **self.layout(change.table).properties}
        # Created, or given the new table's columns: a replaced table's past stays (its rows left
        # it before: ``stream/schema_changes``), under the columns it had.
        ensure_state_table(rules, self.catalog, iceberg_schema(change), properties)
        state = self._loaded(change)
        if change_id is not None and state.table.properties.get(CREATED_ID) != change_id:
            with state.table.transaction() as tx:
                tx.set_properties({CREATED_ID: change_id})
        self._followed(change, state)
        done = "replaced (its past kept)" if replaced else "exists" if existed else "created"
        return ApplyResult(
            change, "no-op" if existed and not replaced else "applied", f"{rules.state_name} {done}"
        )

    @_apply.register
    def _add_column(self, change: AddColumn, change_id: str | None) -> ApplyResult:
        state = self._loaded(change)
        name = change.column.name
        have = {f.name: f for f in state.table.schema().fields}
        if name in have and self.rules_of(change.table).routed:
            return ApplyResult(change, "no-op", f"column {name} exists")  # another source's
        wanted = Schema(NestedField(1, name, iceberg_type(change.column), required=False))
        # A column dropped before (kept, earlier rows hold it) and added again with a type it
        # cannot take goes aside as ``<name>__<old type>``; a promotable one is widened.
        follow_sink_columns(state.table, wanted)
        self._followed(change, state)
        return ApplyResult(change, "applied" if name not in have else "no-op", f"column {name}")

    @_apply.register
    def _drop_column(self, change: DropColumn, change_id: str | None) -> ApplyResult:
        return self._loosened(change, change.name, "kept: earlier rows hold it")

    @_apply.register
    def _loosen(self, change: LoosenColumn, change_id: str | None) -> ApplyResult:
        return self._loosened(change, change.name, "")

    def _loosened(self, change: SchemaChange, name: str, detail: str) -> ApplyResult:
        """A column rows no longer fill made optional (key columns stay required)."""
        state = self._loaded(change)
        schema = state.table.schema()
        keyed = name in set(state.keys())
        if name not in schema.column_names or not schema.find_field(name).required or keyed:
            return ApplyResult(change, "no-op", detail)
        with state.table.update_schema() as update:
            update.update_column(name, required=False)
        return ApplyResult(change, "applied", f"{name} made optional; {detail}".rstrip("; "))

    @_apply.register
    def _rename_column(self, change: RenameColumn, change_id: str | None) -> ApplyResult:
        return ApplyResult(change, "no-op", "renamed with the tables kept beside it")

    @_apply.register
    def _alter_type(self, change: AlterColumnType, change_id: str | None) -> ApplyResult:
        state = self._loaded(change)
        name = change.column.name
        if name not in state.table.schema().column_names:
            raise UnsupportedSchemaChangeError(change, f"there is no column `{name}`")
        current = state.table.schema().find_field(name).field_type
        wanted = iceberg_type(change.column)
        if current == wanted:
            return ApplyResult(change, "no-op", f"{name} is already {wanted}")
        check_promotion(change, current, wanted)
        with state.table.update_schema() as update:
            update.update_column(name, field_type=wanted)
        self._followed(change, state)
        return ApplyResult(change, "applied", f"{current} → {wanted}")

    @_apply.register
    def _primary_key(self, change: AlterPrimaryKey, change_id: str | None) -> ApplyResult:
        state = self._loaded(change)
        keys = list(change.primary_key)
        if state.keys() == keys:
            return ApplyResult(change, "no-op", "the table is keyed so already")
        if state.kind == "history" or not state.signed:
            what = "its history keeps versions" if state.kind == "history" else "its changelog replays"
            raise UnsupportedSchemaChangeError(
                change,
                f"{what} by the key, and the table keeps no upsert table to merge on the new one: earlier "
                "versions of one new key could not be told apart. Fix: keep `upsert` for it (a new "
                "pipeline snapshots it), or a changelog with both images of each update",
            )
        _set_keys(state.table, keys)  # a signed replay needs no key: kept for the tables made from it
        return ApplyResult(change, "applied", f"keyed on ({', '.join(keys)})")

    @_apply.register
    def _table_collation(self, change: AlterTableCollation, change_id: str | None) -> ApplyResult:
        return ApplyResult(change, "no-op", "a default collation is not part of an Iceberg schema")

    @_apply.register
    def _column_default(self, change: AlterColumnDefault, change_id: str | None) -> ApplyResult:
        return ApplyResult(change, "no-op", "binlake keeps source defaults in its schema history")

    @_apply.register
    def _truncate(self, change: TruncateTable, change_id: str | None) -> ApplyResult:
        return ApplyResult(change, "no-op", "its rows' removal is recorded, and the past kept")

    @_apply.register
    def _drop_table(self, change: DropTable, change_id: str | None) -> ApplyResult:
        return ApplyResult(change, "no-op", "its rows' removal is recorded, and the past kept")

    @_apply.register
    def _rename_table(self, change: RenameTable, change_id: str | None) -> ApplyResult:
        return ApplyResult(change, "no-op", "renamed with the tables kept beside it")


def _set_keys(table: Table, keys: list[str]) -> None:
    with table.transaction() as tx:
        tx.set_properties({KEY_COLUMNS: json.dumps(keys)})
