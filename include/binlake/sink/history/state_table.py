"""The state table: the sink table that holds a source table's current rows.

A ``sink.modes`` rule keeps a table's upsert table, its changelog, its history, or any of them
(``config/modes.py``). The current rows — what the snapshot writes, what a backfill replaces, what
``verify`` and the quality checks compare, what an ``ADD COLUMN … DEFAULT`` fills and a ``TRUNCATE``
removes in the tables kept beside it — are those of one of them, the *state table*:

- the upsert table: its live rows (soft-deleted ones stay, marked, but are not current);
- else the history: its current versions;
- else the changelog: the state its changes replay to. Signed, where every update carries both
  images: each ``+I``/``+U`` adds its row, each ``-U``/``-D`` removes one equal to it (exact for any
  table, keyed or not, whatever its keys were over time). By key with after images alone
  (``changelog_updates: after``): each key's last change in (position, order) decides.

The snapshot writes its chunks into the state table, as its rows (``shaped_reads``); the stream's
offset of the table is the state table's (the others commit before it, so it is never ahead of
them). See docs/architecture.md, "Per-table rules", and docs/sink.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo, In
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from binlake.offsets import BinlogOffset
from binlake.schema.iceberg_types import identifier_columns
from binlake.schema.projection import project
from binlake.schema.table_rules import StateKind, TableRules
from binlake.sink.history import changelog, scd2
from binlake.sink.history.soft_delete import COLUMNS as SOFT_DELETE
from binlake.sink.history.soft_delete import live
from binlake.sink.keys.file_bounds import stored_rows
from binlake.sink.keys.row_match import same_key_as_next

_SIGN = "__sign__"


@dataclass(frozen=True)
class StateTable:
    """A source table's state table (see the module docstring)."""

    table: Table
    kind: StateKind
    signed: bool = True
    """A changelog's replay: signed (both images of each update), or by key (after images alone)."""

    @classmethod
    def upsert(cls, table: Table) -> StateTable:
        return cls(table, "upsert")

    @property
    def identifier(self) -> str:
        return ".".join(self.table.name())

    @property
    def metadata_names(self) -> tuple[str, ...]:
        """The table's own columns (the others are the sink table's)."""
        if self.kind == "history":
            return tuple(scd2.METADATA.names)
        if self.kind == "changelog":
            return tuple(changelog.METADATA.names)
        return ()

    def keys(self) -> list[str]:
        """The sink table's key columns (empty: a table without a primary key)."""
        schema = self.table.schema()
        if self.kind == "upsert":
            return identifier_columns(schema)
        if self.kind == "history":
            return [k for k in identifier_columns(schema) if k not in self.metadata_names]
        return list(json.loads(self.table.properties.get(changelog.KEY_COLUMNS, "[]")))

    def sink_schema(self) -> Schema:
        """The sink table's columns as an upsert table holds them: the state table's own left out,
        the key as identifier fields (required)."""
        if self.kind == "upsert":
            return self.table.schema()
        keys = set(self.keys())
        fields = [
            f.model_copy(update={"required": f.required or f.name in keys})
            for f in self.table.schema().fields
            if f.name not in self.metadata_names
        ]
        ids = [f.field_id for f in fields if f.name in keys]
        return Schema(*fields, identifier_field_ids=ids)

    def sink_arrow(self) -> pa.Schema:
        """The sink table's columns (soft-delete ones included) as Arrow."""
        return pa.schema([f for f in self.table.schema().as_arrow() if f.name not in self.metadata_names])

    def stream_offset(self) -> BinlogOffset | None:
        from binlake.sink.exactly_once import stream_offset

        return stream_offset(self.table)

    def rows(self, columns: pa.Schema) -> Iterator[pa.Table]:
        """The current rows in ``columns`` (sink columns), a data file at a time where the kind
        allows (a changelog's replay is read whole)."""
        self.table.refresh()
        if self.kind == "changelog":
            state = self._replayed(AlwaysTrue())
            if state.num_rows:
                yield project(state, columns)
            return
        table = self.table
        for task in table.scan().plan_files():
            data = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks=[task])
            data = live(data) if self.kind == "upsert" else scd2.current(data)
            if data.num_rows:
                yield project(data, columns)

    def rows_of(self, keys: pa.Table) -> pa.Table:
        """The stored rows of these keys (``keys``: the sink's key columns), in the sink's columns:
        the upsert table's (soft-deleted ones too), a history's current versions, the rows a
        changelog's changes of them replay to."""
        columns = self.sink_arrow()
        if not keys.num_rows:
            return columns.empty_table()
        if self.kind == "upsert":
            return stored_rows(self.table, keys)
        if self.kind == "history":
            return project(scd2.current(stored_rows(self.table, keys)), columns)
        state = self._replayed(_key_filter(keys))
        names = list(keys.column_names)
        state = state.join(keys.cast(state.select(names).schema), keys=names, join_type="inner")
        return project(state, columns)

    def _replayed(self, row_filter: BooleanExpression) -> pa.Table:
        """The state a changelog's changes (those ``row_filter`` matches) replay to."""
        names = [f.name for f in self.sink_arrow()]
        keys = self.keys()
        wanted = (*names, changelog.OP, changelog.POSITION, changelog.ORDER)
        changes = self.table.scan(row_filter=row_filter, selected_fields=wanted).to_arrow()
        adds = pc.is_in(changes.column(changelog.OP), pa.array([changelog.INSERT, changelog.AFTER]))
        if self.signed or not keys:
            return _signed(changes.select(names), adds)
        return _last_per_key(changes, adds, keys).select(names)


def state_table(rules: TableRules, catalog: Catalog) -> StateTable | None:
    """``rules``' table's state table (None: not created yet)."""
    identifier = rules.state_name
    if not catalog.table_exists(identifier):
        return None
    return StateTable(catalog.load_table(identifier), rules.state_kind, rules.signed_replay)


def shaped_reads(kind: StateKind, rows: pa.Table, event_time: int, at: BinlogOffset) -> pa.Table:
    """Rows read from the source (sink columns: a snapshot chunk's, at its high watermark ``at``,
    read at ``event_time``) as rows of a state table of ``kind``: ``+I`` reads of a changelog,
    current versions of a history."""
    if kind == "changelog":
        return changelog.read_rows(rows, event_time, at)
    if kind == "history":
        return scd2.opened_rows(rows, event_time, at.packed)
    return rows


def data_schema(schema: Schema) -> Schema:
    """``schema`` without the soft-delete columns (what a changelog or history takes of a sink table)."""
    return Schema(
        *(f for f in schema.fields if f.name not in SOFT_DELETE.names),
        identifier_field_ids=schema.identifier_field_ids,
    )


def _signed(rows: pa.Table, adds: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Rows added (``adds``) and removed, netted: each left as many times as it was added more
    often than removed."""
    if not rows.num_rows:
        return rows
    signs = pc.if_else(adds, 1, -1).cast(pa.int64())
    names = rows.column_names
    net = rows.append_column(_SIGN, signs).group_by(names, use_threads=False).aggregate([(_SIGN, "sum")])
    counts = net.column(f"{_SIGN}_sum").to_numpy(zero_copy_only=False)
    keep = np.repeat(np.arange(len(counts)), np.maximum(counts, 0))
    return net.select(names).take(pa.array(keep, pa.int64())).cast(rows.schema)


def _last_per_key(changes: pa.Table, adds: pa.Array | pa.ChunkedArray, keys: Sequence[str]) -> pa.Table:
    """Each key's last change (by position, then order), where it leaves a row."""
    changes = changes.append_column(_SIGN, adds)
    order = [(k, "ascending") for k in keys] + [
        (changelog.POSITION, "ascending"),
        (changelog.ORDER, "ascending"),
    ]
    ordered = changes.sort_by(order)
    last = ~same_key_as_next(ordered, keys)
    alive = ordered.column(_SIGN).to_numpy(zero_copy_only=False).astype(bool)
    return ordered.filter(pa.array(last & alive, pa.bool_()))


def _key_filter(keys: pa.Table) -> BooleanExpression:
    """A scan filter that holds these keys' rows (on the first key column: a composite key's
    other columns are matched after)."""
    name = keys.column_names[0]
    values = pc.unique(keys.column(name)).to_pylist()
    if len(values) == 1:
        return EqualTo(term=name, value=values[0])
    return In(term=name, values=values)
