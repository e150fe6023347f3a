"""Applying staged backfill units in the stream (docs/architecture.md, step 7), exactly once.

A unit's chunks hold the source's rows of their key ranges at their high watermarks ``h``. The
stream applies a unit in the first batch whose end is at or after every ``h`` of it, in the same
commit as the batch's own changes of the table:

- the sink's rows in the unit's ranges are cleared and replaced with the unit's rows, rolled
  forward: a change to a key in chunk c is applied on top only if it is after c's ``h`` (the
  chunk already holds the ones before, as the snapshot filter does for the initial snapshot);
- when the stream is already past ``h`` (usual: it keeps running while the backfill reads), the
  table's changes from ``h`` to where the stream is are read from the binlog again for the keys in
  the ranges (``read_changes``); the keys outside keep what the stream did (applied once);
- a unit whose table changed schema after its ``h`` is ``stale``: its rows have the old shape
  (the backfill reads it again).

Re-applying a unit (a crash between the commit and the ledger's update) replaces its ranges with
the same rows rolled forward to the new position: the result is the same.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.schema.projection import project
from binlake.schema.type_mapping import select_converter
from binlake.sink.file_systems import file_system
from binlake.sink.keys.row_match import ClearRange, clear_mask, without
from binlake.source.chunks.splitter import ChunkRange
from binlake.state.backfills import BackfillLedger, BackfillUnit
from binlake.stream.records import empty_changes, values
from binlake.stream.shares.last_changes import last_per_key, net_rows
from binlake.stream.shares.patches import complete

log = logging.getLogger(__name__)

#: Reads one table's changes in (start, end] from the binlog as its change table (``stream.records``).
ChangeReader = Callable[[CreateTable, BinlogOffset, BinlogOffset], pa.Table]


@dataclass(frozen=True)
class _Range:
    start: Any
    """Normalised like row values (None: unbounded, and NULL keys)."""
    end: Any
    high: int
    """The chunk's high watermark as a ``records.position``."""


@dataclass
class BackfillPart:
    """A table's share of a batch with backfill units: what to commit instead of the plain merge."""

    units: list[BackfillUnit]
    upserts: pa.Table
    """Keyed: whole rows; keyless: rows to insert."""
    deletes: pa.Table
    """Keyed: key columns; keyless: whole rows to remove one each."""
    clear: list[ClearRange]
    rows: int
    """Backfilled rows written into the cleared ranges."""
    removed: pa.Table | None = None
    """Keyed: the change rows of the deletes among ``deletes`` (soft deletes keep their images)."""


class StagedBackfills:
    """The ledger's staged units, as the stream's batch applier takes them on."""

    def __init__(self, pipeline: str, ledger: BackfillLedger, read_changes: ChangeReader) -> None:
        self.pipeline = pipeline
        self.ledger = ledger
        self.read_changes = read_changes

    def due(self, end: BinlogOffset) -> dict[str, list[BackfillUnit]]:
        """Staged units whose high watermarks are all at or before ``end``, by source table."""
        due: dict[str, list[BackfillUnit]] = {}
        for unit in self.ledger.units(self.pipeline, statuses=["staged"]):
            high = unit.high
            if high is None or high > end:
                continue
            mine = due.setdefault(unit.table.name, [])
            # Two backfills of the same keys: one per batch (the later one next time), or their
            # rows would both be written.
            if not any(
                _overlap(a.range, b.range) for other in mine for a in other.chunks for b in unit.chunks
            ):
                mine.append(unit)
        return due

    def prepare(
        self,
        schema: CreateTable,
        sink: Any,
        units: list[BackfillUnit],
        changes: pa.Table,
        streamed: BinlogOffset | None,
    ) -> BackfillPart:
        """The table's commit: the units' rows rolled forward, plus the batch's ``changes``.

        Args:
            sink: the table's ``stream.shares.table_sink.TableSink``.
            changes: the batch's changes of the table the stream applies anyway (after its own
                filters), all after ``streamed``.
            streamed: where the sink holds every change of the table up to (None: nowhere yet).
        """
        column = schema.column(units[0].key_column)
        convert = select_converter(column) or (lambda v: v)
        ranges = sorted(
            (
                _Range(convert(c.range.start) if c.range.start is not None else None,
                       convert(c.range.end) if c.range.end is not None else None,
                       c.high.packed)
                for u in units for c in u.chunks if c.high is not None
            ),
            key=lambda r: (r.start is not None, r.start),
        )  # fmt: skip
        low = lowest_high(units)
        earlier = empty_changes(schema)
        if streamed is not None and low < streamed:
            earlier = self.read_changes(schema, low, streamed)
            earlier = earlier.filter(_keep(earlier, column.name, ranges, outside=False))
        later = changes.filter(_keep(changes, column.name, ranges, outside=True))
        rows = pa.concat_tables([earlier, later]).sort_by([("at", "ascending"), ("idx", "ascending")])
        staged = project(_read_files(units, sink.sink_arrow), sink.sink_arrow)
        log.info(
            "backfill units %s: %d staged rows, rolled forward from %s (%d changes re-read up to %s, %d in "
            "the batch)",
            ", ".join(u.name for u in units), staged.num_rows, low, earlier.num_rows, streamed,
            later.num_rows,
        )  # fmt: skip
        source_table = schema.table.name if sink.routed else None
        clear = [ClearRange(column.name, r.start, r.end, source_table) for r in ranges]
        if sink.keyed:
            # Updates that lack columns keep the values the unit read (or, outside it, the sink's).
            transformed = sink.transform is not None
            rows = complete(rows, sink.keys, _previous(staged, schema, sink), schema.table.name, transformed)
            keyed = last_per_key(rows, sink.keys)
            # A transform's filter may drop some: deleted.
            upserts, dropped = sink.upserts(keyed, low.file.rsplit(".", 1)[0])
            deletes = sink.key_rows(pa.concat_tables([keyed.deletes.cast(dropped.schema), dropped]))
            names = list(deletes.schema.names)
            touched = pa.concat_tables([upserts.select(names), deletes.cast(upserts.select(names).schema)])
            kept = staged.join(touched, keys=names, join_type="left anti") if touched.num_rows else staged
            upserts = pa.concat_tables([upserts, kept.cast(upserts.schema)])
            return BackfillPart(units, upserts, deletes, clear, staged.num_rows, keyed.removed)
        whole = net_rows(rows)
        inserts, removes = sink.rows(whole.inserts), sink.rows(whole.removes)
        inside = clear_mask(removes, clear)
        kept = without(staged, removes.filter(inside))
        inserts = pa.concat_tables([inserts, kept.cast(inserts.schema)])
        return BackfillPart(units, inserts, removes.filter(pc.invert(inside)), clear, staged.num_rows)

    def applied(self, units: Sequence[BackfillUnit]) -> None:
        self.ledger.finish(self.pipeline, units, "applied")
        for unit in units:
            _remove_files(unit.files)

    def stale(self, units: Sequence[BackfillUnit], reason: str) -> None:
        log.warning("backfill units %s are stale: %s", ", ".join(u.name for u in units), reason)
        self.ledger.finish(self.pipeline, units, "stale", reason)
        for unit in units:
            _remove_files(unit.files)  # a rerun reads a stale unit again, into new files


def lowest_high(units: Sequence[BackfillUnit]) -> BinlogOffset:
    """The smallest high watermark of the staged units' chunks: where their roll-forward begins."""
    return min(c.high for u in units for c in u.chunks if c.high is not None)


def _overlap(a: ChunkRange, b: ChunkRange) -> bool:
    """Whether two key ranges share a key (integral or other keys Python compares like the server)."""
    a_before_b = a.end is not None and b.start is not None and a.end <= b.start
    b_before_a = b.end is not None and a.start is not None and b.end <= a.start
    return not (a_before_b or b_before_a)


def _keep(rows: pa.Table, column: str, ranges: list[_Range], outside: bool) -> pa.Array:
    """Changes to apply: a key (``column``'s value) in a range's chunk only after that chunk's
    high watermark; a key in no range if ``outside``."""
    starts = [r.start for r in ranges if r.start is not None]
    has_open_start = bool(ranges) and ranges[0].start is None
    keep = []
    for value, at in zip(values(rows, column), rows.column("at").to_pylist(), strict=True):
        found = _find(ranges, starts, has_open_start, value)
        keep.append(outside if found is None else at > found.high)
    return pa.array(keep, pa.bool_())


def _find(ranges: list[_Range], starts: list[Any], has_open_start: bool, value: Any) -> _Range | None:
    if value is None:
        return ranges[0] if has_open_start else None
    i = bisect.bisect_right(starts, value) - (0 if has_open_start else 1)
    if i < 0:
        return None
    candidate = ranges[i]
    inside = (candidate.start is None or candidate.start <= value) and (
        candidate.end is None or value < candidate.end
    )
    return candidate if inside else None


def _previous(staged: pa.Table, schema: CreateTable, sink: Any) -> Callable[[pa.Table], pa.Table]:
    """Previous rows of keys: the staged rows of the unit where it holds the key, else the sink's."""

    def previous(keys: pa.Table) -> pa.Table:
        names = [n for n in schema.column_names if n in staged.column_names]
        sink_keys = [k for k in keys.column_names]
        inside = staged.select(names).join(keys.cast(staged.select(sink_keys).schema), keys=sink_keys)
        found = {tuple(r.values()) for r in inside.select(sink_keys).to_pylist()}
        rest = keys.filter(pa.array([tuple(r.values()) not in found for r in keys.to_pylist()], pa.bool_()))
        outside = sink.previous_rows(rest) if rest.num_rows else inside.schema.empty_table()
        return pa.concat_tables([inside, outside.select(names).cast(inside.schema)])

    return previous


def _read_files(units: list[BackfillUnit], schema: pa.Schema) -> pa.Table:
    parts = []
    for unit in units:
        for uri in unit.files:
            filesystem, path = file_system(uri)
            parts.append(pq.read_table(path, filesystem=filesystem))
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts, promote_options="permissive")


def _remove_files(files: Sequence[str]) -> None:
    """Staged files are read into the commit, never adopted: once applied (or stale) they can go."""
    for uri in files:
        try:
            filesystem, path = file_system(uri)
            filesystem.delete_file(path)
        except (OSError, ValueError) as e:  # best effort: a leftover costs space, not correctness
            log.info("could not remove staged file %s: %s", uri, e)
