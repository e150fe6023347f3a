"""Applying one micro-batch to Iceberg (Spark's ``foreachBatch``, in the driver), exactly once.

Per table: drop changes the table already holds (its ``binlake.stream-offset`` property, written in
the same commit as the data, so a replayed batch — Spark re-runs the last one after a crash — is
skipped and a batch cut at another place applies only what is new), drop what the snapshot holds
(``SnapshotFilter``), compact, turn images into Arrow, and commit through the writer with the
batch's end offset. Then the state store records the batch and moves the stream's offset.

The batch is read in parts (``stream.batch_frame``): its head (segment ends, gaps, counts) always;
the changes of the tables merged here; and, for large shares of merge-on-read tables with a key,
only the committables of their merge on the executors (``stream.shares.bucket_merge``), whose files the
same commit adds.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc

from binlake.faults import crash_point
from binlake.offsets import BinlogOffset
from binlake.sink.merge_on_read import merge_on_read
from binlake.source.binlog.event_rows import Gap, gap_message
from binlake.state.backfills import BackfillUnit
from binlake.state.offset_names import STREAM
from binlake.state.store import StateStore, StreamBatch
from binlake.stream.applier_parts import BatchHooks, Healing, SinkTables
from binlake.stream.backfill import lowest_high
from binlake.stream.batch_clock import BatchClock
from binlake.stream.batch_frame import ArrowFrame, BatchFrame, block_counts, first_positions
from binlake.stream.records import SEGMENT, TransactionIds, empty_changes, gaps, table_changes, upserts_only
from binlake.stream.repairs import UnreplicableChangeError
from binlake.stream.shares.bucket_merge import BucketPlan, BucketResult, gather
from binlake.stream.shares.commits import (
    backfill_companions,
    batch_companions,
    binlog_base,
    commit_shares,
    soften_backfill,
)
from binlake.stream.shares.last_changes import last_per_key, net_rows
from binlake.stream.shares.patches import complete
from binlake.stream.shares.table_sink import PreparedShare, TableSink

log = logging.getLogger(__name__)


class BatchApplier:
    """Applies micro-batches of ``stream.records`` rows; call it as Spark's foreachBatch function."""

    def __init__(
        self,
        pipeline: str,
        run_id: str,
        store: StateStore,
        tables: SinkTables,
        healing: Healing | None = None,
        hooks: BatchHooks | None = None,
        merge_from: int | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.run_id = run_id
        self.store = store
        self.tables = tables
        self.healing = healing or Healing()
        self.hooks = hooks or BatchHooks()
        self.error: BaseException | None = None
        # Batches (Spark's callback thread) and backfills applied between them (the job's thread)
        # commit one at a time.
        self._lock = threading.Lock()
        self._last_batch = time.monotonic()
        self._held: dict[str, BinlogOffset] = {}
        self.merge_from = merge_from
        """Changes of a merge-on-read table in one batch from which the executors merge them
        (``stream.shares.bucket_merge``; None: never)."""

    def merges_on_executors(self) -> bool:
        """Whether a sink table of the pipeline may have its share merged on the executors (else a
        batch is best collected whole, in one Spark job)."""
        return self.merge_from is not None and any(
            s.upsert and s.keyed and not s.routed and merge_on_read(s.writer.table.metadata)
            for s in self.tables.sinks.values()
        )

    def __call__(self, frame: BatchFrame, batch_id: int) -> None:
        started = time.monotonic()
        clock = BatchClock()
        try:
            with clock.phase("read"):  # the segment readers run on the executors here
                head = frame.head()
            log.info(
                "batch %d: %d changes read in %.2f s",
                batch_id, sum(block_counts(head).values()), time.monotonic() - started,
            )  # fmt: skip
            with self._lock:
                try:
                    self._apply(frame, head, batch_id, started, clock)
                finally:
                    self._last_batch = time.monotonic()
        except BaseException as e:
            self.error = e  # Spark wraps it in Java exceptions; the job re-raises the original
            raise
        finally:
            frame.close()

    def apply(
        self, data: pa.Table, batch_id: int, started: float | None = None, clock: BatchClock | None = None
    ) -> StreamBatch | None:
        """Apply one batch (``started``: when reading it began, for its rows/s; ``clock``: where
        its time went so far)."""
        frame = ArrowFrame(data)
        with self._lock:
            try:
                return self._apply(frame, frame.head(), batch_id, started, clock or BatchClock())
            finally:
                self._last_batch = time.monotonic()

    def apply_due(self, idle_s: float = 0.0) -> int:
        """Apply the staged backfill units the stream is already past, between batches (a quiet
        source makes no batch that would); returns how many.

        ``idle_s``: only when no batch has finished for this long (a busy stream applies them in
        its next batch, without a commit of their own).
        """
        if self.healing.backfills is None or time.monotonic() - self._last_batch < idle_s:
            return 0
        with self._lock:
            streamed = self.store.offsets(self.pipeline).load(STREAM)
            due = self.healing.backfills.due(streamed) if streamed is not None else {}
            if streamed is None or not due:
                return 0
            if self.hooks.before_batch is not None:
                self.hooks.before_batch()
            by_sink: dict[str, list[PreparedShare]] = {}
            for name, units in sorted(due.items()):
                sink = self.tables.sinks.get(name)
                if sink is None:
                    continue
                at = _later(streamed, sink.writer.stream_offset())
                prepared = self._backfill(name, sink, empty_changes(sink.schema), at, units, at, replay=False)
                if prepared is not None:
                    by_sink.setdefault(prepared.sink.writer.identifier, []).append(prepared)
            for parts in by_sink.values():
                writer = parts[0].sink.writer
                at = _later(streamed, writer.stream_offset())
                commit_shares(parts, writer.last_batch_id() or 0, at, self.tables.complete, force=True)
            units = [u for parts in by_sink.values() for p in parts for u in p.units]
            if units:
                self.healing.backfills.applied(units)
                if self.healing.repairs is not None:
                    self.healing.repairs.applied(units)
                log.info("applied %d backfill units between batches, at %s", len(units), streamed)
                if self.healing.on_backfill is not None:
                    self.healing.on_backfill(
                        {p.name: p.backfilled for parts in by_sink.values() for p in parts}, streamed
                    )
            return len(units)

    def _apply(
        self, frame: BatchFrame, head: pa.Table, batch_id: int, started: float | None, clock: BatchClock
    ) -> StreamBatch | None:
        started = time.monotonic() if started is None else started
        segments = head.filter(pc.equal(head.column("kind"), SEGMENT))
        if segments.num_rows == 0:
            return None
        if self.hooks.before_batch is not None:
            self.hooks.before_batch()
        last = segments.take([pc.index(segments.column("at"), pc.max(segments.column("at"))).as_py()])
        end = BinlogOffset.unpacked(last.column("file")[0].as_py(), last.column("at")[0].as_py())
        found = gaps(head)
        with clock.phase("schemas"):
            self._meet_gaps(found)
            self._follow_schemas(end)
        counts = block_counts(head)
        due = self.healing.backfills.due(end) if self.healing.backfills is not None else {}
        plans = self._bucket_plans(
            counts, first_positions(head), set(due) | {g.table.name for g in found}, binlog_base(end)
        )
        merged = self._merge_on_executors(frame, plans, clock)
        with clock.phase("read"):
            rest = sorted(set(counts) - set(merged))
            changes = table_changes(frame.changes(rest)) if rest else {}
        applied: dict[str, dict[str, int]] = {}
        conflicts = 0
        by_sink: dict[str, list[PreparedShare]] = {}
        gtids = TransactionIds(head)  # the transaction of each change, for changelog rows
        with clock.phase("prepare"):
            streamed = self.store.offsets(self.pipeline).load(STREAM) if due else None
            for name in sorted(set(changes) | set(due)):
                prepared = self._prepare(
                    name, changes.get(name), batch_id, end, due.get(name, []), streamed, gtids
                )
                if prepared is not None:
                    by_sink.setdefault(prepared.sink.writer.identifier, []).append(prepared)
            for name, result in sorted(merged.items()):
                sink = self.tables.sinks[name]
                empty = sink.sink_arrow.empty_table()
                by_sink.setdefault(sink.writer.identifier, []).append(
                    PreparedShare(name, sink, empty, empty, merged=result)
                )
        for identifier, parts in by_sink.items():
            table_started = time.monotonic()
            # A batch read ahead: the binlog held a whole batch more, the stream is catching up.
            parts[0].sink.writer.catching_up = frame.read_ahead
            crash_point("before-commit")
            with clock.phase(f"commit {identifier}"):
                conflicts += commit_shares(parts, batch_id, end, self.tables.complete)
            for part in parts:
                applied[part.name] = part.counts()
            log.info(
                "batch %d: %s %s in %.2f s", batch_id, identifier,
                {p.name: applied[p.name] for p in parts}, time.monotonic() - table_started,
            )  # fmt: skip
        newest = pc.max(segments.column("ts")).as_py() or 0
        finished = dt.datetime.now(dt.UTC)
        batch = StreamBatch(
            self.run_id,
            batch_id,
            self.hooks.anchor(end) if self.hooks.anchor is not None else end,
            applied,
            sum(counts.values()),
            time.monotonic() - started,
            max(0.0, finished.timestamp() - newest) if newest else None,
            finished,
            clock.spent,  # the state phase, below, joins it before anyone reads it
            conflicts,
            frame.read_ahead,
        )
        crash_point("after-commit")
        units = [u for parts in by_sink.values() for p in parts for u in p.units]
        with clock.phase("state"):
            if units and self.healing.backfills is not None:
                self.healing.backfills.applied(units)  # a crash before this re-applies them: same result
                if self.healing.repairs is not None:
                    self.healing.repairs.applied(units)
            self.store.stream_history(self.pipeline).record(batch, STREAM)
        log.info(
            "batch %d: %d changes in %.2f s: %s", batch_id, batch.rows, time.monotonic() - started,
            clock.summary(), extra={"phases": dict(clock.spent)},
        )  # fmt: skip
        if self.hooks.on_batch is not None:
            self.hooks.on_batch(batch)
        return batch

    def _bucket_plans(
        self, counts: dict[str, int], firsts: dict[str, int], driver: set[str], binlog: str
    ) -> dict[str, BucketPlan]:
        """The tables whose share of the batch the executors merge: merge-on-read tables with a
        primary key, enough changes (``merge_from``), a sink of their own and nothing the driver
        must do (``driver``: backfill units due, gaps; a repair's hold; a snapshot still filtering)."""
        plans = {}
        for name, n in counts.items():
            sink = self.tables.sinks.get(name)
            if self.merge_from is None or n < self.merge_from or name in driver or name in self._held:
                continue
            if sink is None or not sink.upsert or not sink.keyed or sink.routed:
                continue
            if not merge_on_read(sink.writer.table.metadata):
                continue
            if sink.changelog is not None or sink.soft_delete:  # the driver keeps their deleted rows
                continue
            done = sink.writer.stream_offset()
            after = done.packed if done is not None else -1
            filtering = (
                self.tables.snapshot_filter is not None
                and not self.tables.snapshot_filter.passes_all(name, max(after + 1, firsts[name]))
            )
            if not filtering:
                plans[name] = sink.bucket_plan(after, binlog)
        return plans

    def _merge_on_executors(
        self, frame: BatchFrame, plans: dict[str, BucketPlan], clock: BatchClock
    ) -> dict[str, BucketResult]:
        """The planned tables' committables; a table some of whose updates lack columns is left
        to the driver (its files are orphans that ``binlake maintain`` removes)."""
        if not plans:
            return {}
        with clock.phase("merge on executors"):
            merged = gather(frame.merge(plans))
        patched = sorted(name for name, result in merged.items() if result.patch)
        if patched:
            log.info("updates of %s lack columns: the driver merges them", patched)
        return {name: result for name, result in merged.items() if not result.patch}

    def _meet_gaps(self, found: list[Gap]) -> None:
        """Changes binlake cannot replicate: held back under a repair, or the stream stops
        (``stream.repairs``) — before anything of the batch is committed."""
        if self.healing.repairs is None:
            if found:
                raise UnreplicableChangeError(gap_message(found[0]), found[0])
            return
        self._held = self.healing.repairs.meet(found)

    def _follow_schemas(self, end: BinlogOffset) -> None:
        """Sinks for the schema versions in force in this batch (a batch never crosses a change)."""
        if self.tables.tracker is None or self.tables.make_sink is None:
            return
        for table, version in self.tables.tracker.versions_at(end).items():
            current = self.tables.sinks.get(table.name)
            if current is not None and current.version == version.offset:
                continue
            if current is not None and current.version is None and current.schema == version.schema:
                current.version = version.offset  # the version the stream started with
                continue
            assert version.schema is not None
            sink = self.tables.make_sink(version.schema, version.offset)
            if sink is None:
                self.tables.sinks.pop(table.name, None)
            else:
                self.tables.sinks[table.name] = sink

    def _prepare(
        self,
        name: str,
        rows: pa.Table | None,
        batch_id: int,
        end: BinlogOffset,
        units: list[BackfillUnit],
        streamed: BinlogOffset | None,
        gtids: TransactionIds,
    ) -> PreparedShare | None:
        """Filter and compact one source table's changes (and due backfill units) into rows for
        its sink table (``gtids``: the batch's transactions, for its changelog rows)."""
        sink = self.tables.sinks.get(name)
        if sink is None:
            if rows is not None:
                log.warning(
                    "batch %d: %d changes of %s dropped: the sink has no table for it "
                    "(its creation was not applied under the pipeline's schema change behaviour)",
                    batch_id, rows.num_rows, name,
                )  # fmt: skip
            return None
        if rows is None:
            rows = empty_changes(sink.schema)
        done = sink.writer.stream_offset()
        if done is not None:
            rows = rows.filter(pc.greater(rows.column("at"), done.packed))
        if self.tables.snapshot_filter is not None:
            rows = self.tables.snapshot_filter.keep(name, rows)
        if units:
            at = done if streamed is None else _later(streamed, done)
            backfill = self._backfill(name, sink, rows, end, units, at, gtids=gtids)
            if backfill is not None:
                return backfill
        held = self._held.get(name)
        if held is not None:  # a repair holds the table back from there: see stream/repairs.py
            rows = rows.filter(pc.less(rows.column("at"), held.packed))
        if rows.num_rows == 0:
            return None
        if sink.keyed:
            rows = complete(rows, sink.keys, sink.previous_rows, name, sink.transform is not None)
        companions = batch_companions(sink, rows, end, gtids)
        if not sink.upsert:  # kept without an upsert table: its changelog's or history's rows alone
            empty = sink.sink_arrow.empty_table()
            return PreparedShare(name, sink, empty, sink.sink_key_arrow.empty_table(), companions=companions)
        rows = upserts_only(rows)
        if sink.keyed:
            keyed = last_per_key(rows, sink.keys)
            upserts, dropped = sink.upserts(keyed, binlog_base(end))
            if sink.soft_delete:  # deletes stay as rows, marked; a row the filter drops goes
                upserts, deletes = sink.softened(upserts, keyed.removed), dropped
            elif dropped.num_rows:
                deletes = pa.concat_tables([keyed.deletes.cast(dropped.schema), dropped])
            else:
                deletes = keyed.deletes
            return PreparedShare(name, sink, upserts, sink.key_rows(deletes), companions=companions)
        whole = net_rows(rows)
        inserts, removes = sink.rows(whole.inserts), sink.rows(whole.removes)
        return PreparedShare(name, sink, inserts, removes, companions=companions)

    def _backfill(
        self,
        name: str,
        sink: TableSink,
        rows: pa.Table,
        end: BinlogOffset,
        units: list[BackfillUnit],
        streamed: BinlogOffset | None,
        replay: bool = True,
        gtids: TransactionIds | None = None,
    ) -> PreparedShare | None:
        """The table's share with its due backfill units (None: they wait, or went stale).

        ``replay``: whether a batch that ends where the table is already (Spark replays the last
        batch after a restart) is possible; its units wait for the next batch.
        """
        assert self.healing.backfills is not None
        if replay and streamed is not None and end <= streamed:
            return None
        if self.tables.tracker is not None:
            low = lowest_high(units)
            then, now = (
                self.tables.tracker.versions_at(low).get(sink.schema.table),
                self.tables.tracker.versions_at(end).get(sink.schema.table),
            )
            if then is None or now is None or then.offset != now.offset:
                self.healing.backfills.stale(
                    units,
                    f"the schema of {name} changed between the backfill's read ({low}) and the stream "
                    f"({end})",
                )
                return None
        part = self.healing.backfills.prepare(sink.schema, sink, units, upserts_only(rows), streamed)
        share = PreparedShare(name, sink, part.upserts, part.deletes, part.clear, part.units, part.rows)
        share.companions = backfill_companions(sink, rows, share, end, gtids)
        if sink.soft_delete:
            soften_backfill(sink, share, part.removed, end)
        return share


def _later(a: BinlogOffset, b: BinlogOffset | None) -> BinlogOffset:
    return a if b is None or b <= a else b
