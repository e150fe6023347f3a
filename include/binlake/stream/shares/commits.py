"""A batch's commits to one sink table: its upsert table, and its changelog and history first.

The changelog and history commit first (in that order): a crash between the commits leaves them
ahead, and the rerun computes the upsert table's rows from changes after *its* offset
(``stream.shares.patches`` completes them from the upsert table, which must then not be ahead of
them). Each table records its own offset in its own commit, so none applies a change twice
(``sink/exactly_once.py``). A table kept without an upsert table has the history (else the
changelog) for its state table, which commits last for the same reason.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc

from binlake.errors import BinlakeError
from binlake.faults import crash_point
from binlake.offsets import BinlogOffset
from binlake.sink.history.changelog import POSITION, replaced_rows
from binlake.sink.history.changelog_writer import rows_in_ranges
from binlake.sink.history.soft_delete import COLUMNS as SOFT_DELETE
from binlake.sink.history.soft_delete import live, live_mask, marked_deleted
from binlake.sink.keys.row_match import ClearRange, clear_mask, without
from binlake.stream.records import TransactionIds, images
from binlake.stream.shares.table_sink import PreparedShare, TableSink

#: The tables a sink table may keep beside it (``TableSink`` and ``PreparedShare`` attributes).
COMPANIONS = ("changelog", "history")


def commit_shares(
    parts: list[PreparedShare], batch_id: int, end: BinlogOffset, complete: bool, force: bool = False
) -> int:
    """One commit per sink table, whatever number of (routed) source tables feed it; ``force``:
    backfill units applied between batches, at an offset the table holds already. Returns the
    conflicts the sink table's commit met (each refreshed, checked and tried again)."""
    sink = parts[0].sink
    if any(p.sink.keyed != sink.keyed for p in parts):
        raise BinlakeError(
            f"The sources routed to {sink.writer.identifier} ({', '.join(p.name for p in parts)}) mix "
            "tables with and without a primary key, which one sink table cannot hold. Fix: route "
            "them to different sink tables."
        )
    if _commit_companions(parts, batch_id, end, force) and sink.upsert:
        crash_point("between-commits")
    if not sink.upsert:  # the changelog and history were all: the state table is one of them
        return 0
    upserts = concat([p.upserts for p in parts])
    deletes = concat([p.deletes for p in parts])
    clear = [c for p in parts for c in p.clear]
    merged = parts[0].merged
    if merged is not None:  # one part: routed sinks merge in the driver
        keys = merged.all_keys(sink.sink_key_arrow)
        result = sink.writer.merge_files(batch_id, merged.files, keys, end)
    elif sink.keyed:
        result = sink.writer.merge_batch(batch_id, upserts, deletes, offset=end, clear=clear, force=force)
    else:
        prune = sink.keys[0] if sink.keys and len(parts) == 1 else None
        result = sink.writer.apply_rows(batch_id, upserts, deletes, end, prune, complete, clear, force)
    return result.attempts - 1


def _commit_companions(parts: list[PreparedShare], batch_id: int, end: BinlogOffset, force: bool) -> bool:
    """Commit the parts' changelog and history rows, to the tables their sink table keeps
    (whether it keeps any)."""
    committed = False
    for kind in COMPANIONS:
        writers = {id(getattr(p.sink, kind)): getattr(p.sink, kind) for p in parts}
        if writers == {id(None): None}:
            continue
        writer = next(iter(writers.values()))
        if len(writers) > 1 or writer is None:
            raise BinlakeError(
                f"The sources routed to {parts[0].sink.writer.identifier} "
                f"({', '.join(p.name for p in parts)}) do not all keep a {kind} table, so their shared "
                "one would miss changes. Fix: give them the same `sink.modes` rule."
            )
        rows = concat([p.companions[kind] for p in parts if kind in p.companions])
        units = [u.name for p in parts for u in p.units]
        filled = sorted(set.intersection(*(set(p.sink.filled()) for p in parts)))
        if committed:
            crash_point("between-companions")
        if force:
            writer.append_units(rows, units, filled)
        else:
            writer.append_batch(batch_id, rows, end, units, filled)
        committed = True
    return committed


def batch_companions(
    sink: TableSink, changes: pa.Table, end: BinlogOffset, gtids: TransactionIds | None = None
) -> dict[str, pa.Table]:
    """The changelog rows of a table's share of a batch, for each of its changelog and history
    tables, computed once: each gets those past its own offset (``changes``: after the upsert
    table's offset, which is never ahead of theirs; ``gtids``: the batch's transactions)."""
    writers = sink.companions()
    if not writers:
        return {}
    # A history closes each version with the before image of its key's first change: both images.
    both = sink.changelog_rows(changes, binlog_base(end), gtids, "both")
    rows = {kind: both for kind in writers}
    if "changelog" in writers and sink.changelog_updates != "both":
        rows["changelog"] = sink.changelog_rows(changes, binlog_base(end), gtids)
    return {kind: _past(rows[kind], writer.stream_offset()) for kind, writer in writers.items()}


def _past(rows: pa.Table, offset: BinlogOffset | None) -> pa.Table:
    """Changelog rows after ``offset`` (an update's two images share their position)."""
    return rows if offset is None else rows.filter(pc.greater(rows.column(POSITION), offset.packed))


def backfill_companions(
    sink: TableSink,
    changes: pa.Table,
    share: PreparedShare,
    end: BinlogOffset,
    gtids: TransactionIds | None = None,
) -> dict[str, pa.Table]:
    """The changelog rows of a share with backfill units, for each changelog and history table:
    the batch's changes of keys outside the units' ranges, then the ranges brought to the new
    rows: ``-D`` of the rows that table holds there that the source no longer has, ``+I`` of the
    new ones it lacks — measured against its own state, not the upsert table's (a repair may
    follow damage to the upsert table alone)."""
    clear: list[ClearRange] = share.clear
    outside = changes.filter(pc.invert(sink.in_ranges(changes, clear))) if clear else changes
    stream = batch_companions(sink, outside, end, gtids)
    new = share.upserts.filter(clear_mask(share.upserts, clear)) if clear else share.upserts
    columns = [n for n in sink.sink_arrow.names if n in new.column_names and n not in SOFT_DELETE.names]
    found = {}
    for kind, writer in sink.companions().items():
        held = writer.state_in_ranges(clear, columns) if clear else new.select(columns).slice(0, 0)
        held = held.select(columns)
        fresh = live(new).select(columns).cast(held.schema)
        replaced = replaced_rows(without(held, fresh), without(fresh, held), end, int(time.time()))
        found[kind] = concat([stream[kind], replaced])
    return found


def soften_backfill(
    sink: TableSink, share: PreparedShare, removed: pa.Table | None, end: BinlogOffset
) -> None:
    """A soft-delete table's share with backfill units: the deletes the units' roll-forward met
    (``removed``) and the rows of their ranges the source no longer has stay, marked deleted (at
    ``end``, now); rows marked before stay as they were."""
    names = sink.sink_key_arrow.names
    held = rows_in_ranges(sink.writer.table, share.clear) if share.clear else sink.sink_arrow.empty_table()
    gone_keys = (
        sink.key_rows(images(removed, sink.keys))
        if removed is not None and removed.num_rows
        else sink.sink_key_arrow.empty_table()
    )
    kept = pa.concat_tables([share.upserts.select(names).cast(sink.sink_key_arrow), gone_keys])
    vanished = held.join(kept, keys=names, join_type="left anti") if held.num_rows else held
    mask = live_mask(vanished)
    fresh = vanished.filter(mask) if mask is not None else vanished
    at = pa.array([end.packed] * fresh.num_rows, pa.int64())
    marked = marked_deleted(fresh, pa.array([int(time.time())] * fresh.num_rows, pa.int64()), at)
    before = vanished.filter(pc.invert(mask)) if mask is not None else vanished.slice(0, 0)
    share.upserts = sink.softened(
        share.upserts, removed, pa.concat_tables([marked, before.cast(marked.schema)])
    )
    if gone_keys.num_rows and share.deletes.num_rows:
        share.deletes = share.deletes.join(gone_keys, keys=names, join_type="left anti")


def binlog_base(offset: BinlogOffset) -> str:
    """The binlog files' base name (``binlog`` of ``binlog.000123``)."""
    return offset.file.rsplit(".", 1)[0]


def concat(tables: list[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
