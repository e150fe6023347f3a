"""Writes a history table (``sink/history/scd2.py``), exactly once.

A batch's commit closes the versions its changes end and adds those they open, in one merge on
the table's identity (the key and the change that opened the version) that also records the
batch's end offset. The versions it closes are known without reading the table where it can
(``sink/history/current_versions.py``), so that a batch costs what it changes. Seeding (snapshot
chunks, or the state table's rows for a history added to a running pipeline) is the changelog's
(``ChangelogWriter``), with the rows as current versions; a history that is its table's state table
(no upsert table) is written by the snapshot itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog

from binlake.offsets import BinlogOffset
from binlake.schema.iceberg_types import identifier_columns
from binlake.schema.projection import project
from binlake.sink.compaction import CompactionPolicy
from binlake.sink.history.changelog import BEFORE, DELETE, OP, ColumnFill, epoch_base, of_source
from binlake.sink.history.changelog_writer import (
    CHANGE_KEY,
    UNITS_KEY,
    ChangelogWriter,
    rows_in_ranges,
)
from binlake.sink.history.current_versions import CurrentVersions, valid_from
from binlake.sink.history.scd2 import (
    CURRENT,
    METADATA,
    VALID_TO,
    closed,
    current,
    current_from_images,
    first_changes,
    opened_rows,
    refilled,
    versions,
)
from binlake.sink.history.soft_delete import COLUMNS as SOFT_DELETE
from binlake.sink.history.state_table import StateTable
from binlake.sink.keys.file_bounds import stored_rows
from binlake.sink.keys.row_match import ClearRange
from binlake.sink.pyiceberg_internals import transaction

log = logging.getLogger(__name__)


class HistoryWriter(ChangelogWriter):
    """Writes the versions of one history table; ``keys``: the sink table's key columns."""

    metadata_names = tuple(METADATA.names)

    def __init__(
        self,
        catalog: Catalog,
        identifier: str,
        keys: Sequence[str],
        merge_manifests_at: int = 0,
        keep_snapshots: int = 0,
        background_upkeep: bool = False,
        key_index_dir: Path | None = None,
        compaction: CompactionPolicy | None = None,
    ) -> None:
        super().__init__(
            catalog, identifier, merge_manifests_at, key_index_dir, compaction, keep_snapshots,
            background_upkeep=background_upkeep,
        )  # fmt: skip
        self.keys = list(keys)
        self._versions_index: CurrentVersions | None = None
        # The columns some batch's source did not fill: a set that only grows, so that batches of
        # routed sources filling different columns do not rebuild the index in turn.
        self._unfilled: set[str] = set()

    def remove_all(
        self, state: StateTable, at: BinlogOffset, change_id: str, event_time: int, source: str | None = None
    ) -> int:
        """Close every current version (``source``'s alone, on a table routed sources share) at
        ``at`` and ``event_time`` (a TRUNCATE or DROP of the source table), once."""
        if self.holds_change(change_id):
            return 0
        current = of_source(self.table.scan(row_filter=f"{CURRENT} == True").to_arrow(), source)
        n = current.num_rows
        times = pa.array([event_time * 1_000_000] * n, pa.int64()).cast(METADATA.field(VALID_TO).type)
        position = at.packed + epoch_base(self.table)
        ended = closed(current, times, pa.array([position] * n, pa.int64()), current.schema)
        self._merge_rows({CHANGE_KEY: change_id}, ended)
        return int(n)

    def fill_all(self, state: StateTable, fill: ColumnFill, after_only: bool = False) -> int:
        """``fill``: each current version of the rows that got the value closed at the statement,
        and a version with the value opened there, once (the commit records ``fill.change_id``);
        returns the rows filled."""
        if self.holds_change(fill.change_id):
            return 0
        self.add_column(fill)
        current = fill.mine(self.table.scan(row_filter=f"{CURRENT} == True").to_arrow())
        versions = refilled(current, fill, self.table.schema().as_arrow(), epoch_base(self.table))
        self._merge_rows({CHANGE_KEY: fill.change_id}, versions)
        return int(current.num_rows)

    def state_in_ranges(self, clear: Sequence[ClearRange], columns: Sequence[str]) -> pa.Table:
        """The current versions in the ``clear`` ranges (``columns``)."""
        self.table.refresh()
        return current(rows_in_ranges(self.table, clear)).select(list(columns))

    def _as_reads(self, rows: pa.Table, event_time: int, at: BinlogOffset) -> pa.Table:
        return opened_rows(rows, event_time, at.packed + epoch_base(self.table))

    def _write(self, properties: dict[str, str], changes: pa.Table, filled: Sequence[str] | None) -> None:
        """Close and open the versions a batch's changelog rows (``changes``) make, in one commit
        (``filled``: the sink columns the source fills; None: the versions it closes are read from
        the table)."""
        if not changes.num_rows:
            self._merge_rows(properties, None)
            return
        snapshot = self.table.current_snapshot()
        before = snapshot.snapshot_id if snapshot is not None else None
        schema = self.table.schema().as_arrow()
        index = self._current_versions(filled)
        current = self._closing(changes, index, schema)
        rows = versions(changes, current, self.keys, schema)
        self._merge_rows(properties, rows)
        if index is not None:
            index.apply(self.table, changes.select(self.keys), rows.filter(rows.column(CURRENT)), before)

    def _current_versions(self, filled: Sequence[str] | None) -> CurrentVersions | None:
        """The index of the table's current versions, ready (None: the versions a batch closes are
        read from the table — it has no key index, or ``filled`` is not known)."""
        identity = identifier_columns(self.table.schema())
        if filled is None or self._index(identity) is None or self.key_index_dir is None:
            return None
        if self._versions_index is None:
            name = f"{self.identifier}-{self.table.metadata.table_uuid}-current"
            self._versions_index = CurrentVersions(self.key_index_dir / name, self.keys)
        own = set(self.metadata_names) | set(SOFT_DELETE.names)
        columns = [f.name for f in self.table.schema().fields if f.name not in own]
        self._unfilled |= {name for name in columns if name not in filled}
        unfilled = [name for name in columns if name in self._unfilled]
        return self._versions_index if self._versions_index.ready(self.table, unfilled) else None

    def _closing(self, changes: pa.Table, index: CurrentVersions | None, schema: pa.Schema) -> pa.Table:
        """The versions current before the batch of the keys ``changes`` change: each made of its
        key's first before image and its index record, or read from the table where those do not
        hold it (module docstring of ``sink/history/current_versions.py``)."""
        firsts = first_changes(changes, self.keys)
        if index is None:
            return self.current(firsts.select(self.keys))
        found = index.versions(firsts.select(self.keys))
        current = found["order"] >= 0
        imaged = pc.is_in(firsts.column(OP), pa.array([BEFORE, DELETE])).to_numpy(zero_copy_only=False)
        from_image = current & imaged & (found["held"] == 0)
        made = firsts.filter(pa.array(from_image))
        kept = found[from_image]
        closing = current_from_images(made, kept["opened"], kept["order"], valid_from(kept), schema)
        if not self._stored(closing):
            index.forget()  # describes versions the table does not hold: rebuilt at the next batch
            return self.current(firsts.select(self.keys))
        read = current & ~from_image
        if read.any():
            stored = self.current(firsts.filter(pa.array(read)).select(self.keys))
            closing = pa.concat_tables([closing, stored.cast(closing.schema)])
        return closing

    def _stored(self, closing: pa.Table) -> bool:
        """Whether every one of the ``closing`` versions is a row of the table (by identity)."""
        identity = identifier_columns(self.table.schema())
        index = self._index(identity)
        if index is None or not closing.num_rows:
            return True
        found = sum(len(p) for p in index.positions(closing.select(identity)).values())
        if found != closing.num_rows:
            log.warning(
                "the current versions kept for %s name %d versions the table does not hold: the "
                "batch reads them from the table, and the index is rebuilt",
                self.identifier, closing.num_rows - found,
            )  # fmt: skip
            return False
        return True

    def _upkeep(self, changes: int, catching_up: bool) -> None:
        super()._upkeep(changes, catching_up)
        if self._versions_index is not None:
            self._versions_index.consolidate()

    def _merge_rows(self, properties: dict[str, str], rows: pa.Table | None) -> None:
        """One commit replacing the versions of ``rows`` by identity (adding the new ones), with
        ``properties`` in its summary (and, but for the summary's own keys, the table's)."""
        kept = {k: v for k, v in properties.items() if k not in (UNITS_KEY, CHANGE_KEY)}
        if rows is None or not rows.num_rows:
            with transaction(self.table) as tx:
                tx.set_properties(kept)
            return
        schema = self.table.schema()
        rows = project(rows, schema.as_arrow())
        identity = identifier_columns(schema)
        self._merge(properties, rows, rows.select(identity), identity)

    def current(self, keys: pa.Table) -> pa.Table:
        """The current versions of these keys (the table's key columns)."""
        return current(stored_rows(self.table, keys))
