"""A captured table's sink in the stream (one schema version of the table, and the Iceberg table
its changes go to), and its share of a micro-batch once prepared for the commit."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.schema.projection import project
from binlake.schema.routes import SOURCE_TABLE_COLUMN, with_source_table
from binlake.schema.table_rules import StateKind
from binlake.schema.transforms import Transform
from binlake.schema.type_mapping import arrow_schema
from binlake.sink.history.changelog import changelog_rows
from binlake.sink.history.changelog_writer import ChangelogWriter
from binlake.sink.history.scd2_writer import HistoryWriter
from binlake.sink.history.soft_delete import marked_deleted, marked_live
from binlake.sink.history.state_table import StateTable
from binlake.sink.keys.row_match import ClearRange, clear_mask
from binlake.sink.writer import IcebergWriter
from binlake.state.backfills import BackfillUnit
from binlake.stream.records import TransactionIds, images, key_columns
from binlake.stream.shares.bucket_merge import BucketPlan, BucketResult
from binlake.stream.shares.last_changes import KeyedChanges


@dataclass
class TableSink:
    """A captured table (one schema version of it) and the Iceberg table its changes go to."""

    schema: CreateTable
    writer: IcebergWriter
    chunk_keys: dict[str, str]
    version: BinlogOffset | None = None
    """Where this schema version began (None: the schema the stream started with)."""
    routed: bool = False
    """Whether the sink table is shared by routed sources (rows carry ``_source_table``)."""
    transform: Transform | None = None
    """The table's projection and filter (``schema.transforms``), if a rule matches it."""
    changelog: ChangelogWriter | None = None
    """The table's changelog table, if its ``sink.modes`` rule keeps one (``sink/history/changelog.py``)."""
    history: HistoryWriter | None = None
    """The table's history table (SCD2), if its ``sink.modes`` rule keeps one (``sink/history/scd2.py``)."""
    changelog_updates: str = "both"
    """``both`` images of an update in the changelog, or the ``after`` image alone."""
    soft_delete: bool = False
    """Whether rows the source deletes stay, marked (``sink/history/soft_delete.py``)."""
    state_kind: StateKind = "upsert"
    """Which table ``writer`` writes: the upsert table, or without one the history or changelog
    (``sink/history/state_table.py``), then also ``history`` or ``changelog``."""
    signed: bool = True
    """A changelog state table's replay: signed, or by key (``StateTable.signed``)."""

    def __post_init__(self) -> None:
        self.arrow = arrow_schema(self.schema)
        self.keys = key_columns(self.schema, self.chunk_keys)
        self.keyed = bool(self.schema.primary_key)
        self.key_arrow = arrow_schema(self.schema, list(self.keys)) if self.keys else pa.schema([])
        # The sink's own schema: after a schema change it may differ from the source's (lenient
        # keeps dropped columns, ignore keeps everything); rows are projected onto it by name.
        self.sink_arrow = self.state.sink_arrow()
        present = set(self.sink_arrow.names)
        sink_keys = [SOURCE_TABLE_COLUMN, *self.keys] if self.routed else list(self.keys)
        self.sink_key_arrow = pa.schema([self.sink_arrow.field(k) for k in sink_keys if k in present])

    @property
    def upsert(self) -> bool:
        """Whether the sink keeps an upsert table (else its changes go to the tables kept beside it alone)."""
        return self.state_kind == "upsert"

    @property
    def state(self) -> StateTable:
        """The table holding the current rows (``sink/history/state_table.py``)."""
        return StateTable(self.writer.table, self.state_kind, self.signed)

    def bucket_plan(self, after: int, binlog: str = "binlog") -> BucketPlan:
        """What executors need to merge this table's changes after position ``after``
        (``stream.shares.bucket_merge``)."""
        table = self.writer.table
        return BucketPlan(
            self.schema.table.name, self.arrow, self.keys, self.sink_arrow, self.sink_key_arrow,
            table.metadata, table.io, after, self.transform, binlog,
        )  # fmt: skip

    def rows(self, images: pa.Table) -> pa.Table:
        """Rows of the source table (change tables' images) as rows of the sink table (whole rows of
        a table without a key: the filter drops those it does not keep, as the sink never held them)."""
        images = images.cast(self.arrow)
        if self.transform is not None:
            images = self.transform.project(images.filter(self.transform.keep(images)))
        return project(self._routed(images), self.sink_arrow)

    def upserts(self, last: KeyedChanges, binlog: str = "binlog") -> tuple[pa.Table, pa.Table]:
        """A batch's last upserts per key as rows of the sink table, and the keys (the source's
        columns) of those a transform's filter drops: deleted in the sink (``binlog``: the binlog
        files' base name, for ``__binlog_position__``)."""
        images = last.upserts.cast(self.arrow)
        if self.transform is None:
            return self.rows(images), images.select(list(self.keys)).slice(0, 0)
        kept, dropped = self.transform.upserts(images, last.times, last.positions, binlog, last.ops)
        return project(self._routed(kept), self.sink_arrow), dropped

    def previous_rows(self, keys: pa.Table) -> pa.Table:
        """The sink's rows of these source keys, as rows of the source's columns (those the sink
        has): the values an update that lacks columns keeps (``stream.shares.patches``)."""
        stored = self.state.rows_of(self.key_rows(keys))
        return stored.select([n for n in self.schema.column_names if n in stored.column_names])

    def filled(self) -> list[str]:
        """The sink columns the source's rows fill (the others the sink keeps for its earlier rows:
        columns the source dropped, or ``ignore``'s)."""
        names = (
            {i.name for i in self.transform.items}
            if self.transform is not None
            else set(self.schema.column_names)
        )
        if self.routed:
            names.add(SOURCE_TABLE_COLUMN)
        return [n for n in self.sink_arrow.names if n in names]

    def companions(self) -> dict[str, ChangelogWriter]:
        """The writers of the changelog and history tables it keeps, by kind."""
        kept = {"changelog": self.changelog, "history": self.history}
        return {kind: writer for kind, writer in kept.items() if writer is not None}

    def changelog_rows(
        self, changes: pa.Table, binlog: str, gtids: TransactionIds | None = None, updates: str | None = None
    ) -> pa.Table:
        """The changes (before images included) as rows of the changelog table (``gtids``: of the
        batch's transactions; ``updates``: which images of an update, default the changelog's)."""
        kept = self.transform.keep(images(changes).cast(self.arrow)) if self.transform is not None else None
        gtid_of = gtids.of if gtids is not None else None
        return changelog_rows(
            changes, kept, lambda c: self.rows(images(c)), binlog, updates or self.changelog_updates, gtid_of
        )

    def softened(
        self, upserts: pa.Table, removed: pa.Table | None, vanished: pa.Table | None = None
    ) -> pa.Table:
        """A soft-delete table's upserts: ``upserts`` live; the rows of ``removed`` (change rows of
        deletes, whole images) marked deleted by their events; ``vanished`` (sink rows a backfill
        found gone from the source, already marked)."""
        parts = [marked_live(upserts)]
        if removed is not None and removed.num_rows:
            if self.transform is not None:  # a row the filter never let in is not in the sink
                removed = removed.filter(self.transform.keep(images(removed).cast(self.arrow)))
            gone = self.rows(images(removed))
            parts.append(marked_deleted(gone, removed.column("ts"), removed.column("at")))
        if vanished is not None and vanished.num_rows:
            parts.append(vanished)
        return pa.concat_tables([project(p, self.sink_arrow) for p in parts])

    def in_ranges(self, changes: pa.Table, clear: list[ClearRange]) -> pa.Array:
        """Which changes are of keys in the ``clear`` ranges (a backfill's)."""
        return clear_mask(self._routed(images(changes, {c.column for c in clear})), clear)

    def key_rows(self, keys: pa.Table) -> pa.Table:
        """Key columns of the source table as the sink table's key columns."""
        return project(self._routed(keys.cast(self.key_arrow)), self.sink_key_arrow)

    def _routed(self, rows: pa.Table) -> pa.Table:
        return with_source_table(self.schema.table, rows) if self.routed else rows


@dataclass
class PreparedShare:
    """One source table's share of a batch, ready to commit (with others routed to its sink)."""

    name: str
    sink: TableSink
    upserts: pa.Table
    deletes: pa.Table
    clear: list[ClearRange] = field(default_factory=list)
    """Key ranges a backfill replaces (their stored rows go; ``upserts`` holds their new rows)."""
    units: list[BackfillUnit] = field(default_factory=list)
    backfilled: int = 0
    merged: BucketResult | None = None
    """The executors' committables (``upserts``/``deletes`` are then empty)."""
    companions: dict[str, pa.Table] = field(default_factory=dict)
    """Changelog rows (``sink/history/changelog.py``) for the table's changelog and history tables,
    by kind (``changelog``, ``history``), for those it keeps."""

    def counts(self) -> dict[str, int]:
        if not self.sink.upsert:  # the rows each table kept beside none appended (or versions written)
            return {kind: rows.num_rows for kind, rows in self.companions.items()}
        kind = ("upserts", "deletes") if self.sink.keyed else ("inserts", "deletes")
        if self.merged is not None:
            return {kind[0]: self.merged.upserts, kind[1]: self.merged.deletes}
        counts = {kind[0]: self.upserts.num_rows, kind[1]: self.deletes.num_rows}
        return counts | ({"backfilled": self.backfilled} if self.units else {})
