"""A pipeline's status, step by step: what is planned and read, where the stream is, the schema
changes waiting or done, the newest quality run, the last backfills.

Read from the state store only (no source, no catalog, no Spark): ``binlake status`` and the
Airflow UI can ask it at any moment, cheaply. The CLI only renders it (``cli_render``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import BaseModel

from binlake.backfill.progress import unit_counts
from binlake.config import PipelineSection
from binlake.events import describe_change
from binlake.offsets import BinlogOffset
from binlake.state.backfills import BackfillLedger
from binlake.state.leases import Command
from binlake.state.offset_names import STREAM, SWITCH
from binlake.state.repair_ledger import RepairLedger
from binlake.state.store import StateStore, StoredPlan
from binlake.state.tables import utc_now
from binlake.stream.positions import HEAD
from binlake.stream.repairs import HEAL_PREFIX

#: How many finished schema changes and backfills the status shows (pending ones: all).
RECENT = 5


class TableStatus(BaseModel):
    table: str
    strategy: str
    """How the snapshot split it, or ``streamed``: a table the stream created or renamed in since."""
    chunks: int
    finished_chunks: int
    rows: int
    max_high_watermark: str
    streamed_since: str | None = None
    """Where the stream began keeping a table the snapshot did not plan, and why."""


class BatchStatus(BaseModel):
    batch_id: int
    rows: int
    changes: dict[str, dict[str, int]]
    """Table → op → rows applied."""
    seconds: float
    lag_s: float | None
    finished_at: str


class StreamStatus(BaseModel):
    offset: dict[str, Any]
    applied_at: str
    source_head: dict[str, Any] | None
    source_checked_at: str | None
    caught_up: bool
    last_batch: BatchStatus | None
    running: bool = False
    """Whether a live process holds the stream's writer lease."""
    writer: str | None = None
    """Who holds (or last held) it."""

    @property
    def lag_s(self) -> float | None:
        """The lag now: 0 once the stream holds what the source's binlog did when it last looked,
        else its last batch's (None: no batch yet)."""
        if self.caught_up:
            return 0.0
        return self.last_batch.lag_s if self.last_batch is not None else None


class SchemaChangeStatus(BaseModel):
    offset: str
    change: str
    behavior: str
    status: str
    message: str | None


class QualityStatus(BaseModel):
    run_name: str
    checked_at: str
    success: bool
    failed: list[str]
    tables: int
    report: str | None


class BackfillStatus(BaseModel):
    backfill_id: str
    tables: list[str]
    units: dict[str, int]
    rows: int


class VerifyStatus(BaseModel):
    verify_id: str
    tables: dict[str, dict[str, int]]
    """Table → chunks per verdict (equal, drifted, unverified, repaired)."""
    drifted: list[str]
    """Each drifted chunk: ``table [start, end): source N rows, sink M rows``."""


class RepairStatus(BaseModel):
    """A table held back from a change binlake could not replicate, until a backfill is applied."""

    table: str
    since: str
    reason: str
    backfill_id: str
    healing: bool
    """The stream reads the backfill itself (``stream.on_gap: backfill``)."""


class PipelineStatus(BaseModel):
    pipeline: str
    tables: list[TableStatus]
    switch_offset: dict[str, Any] | None
    stream: StreamStatus | None
    schema_changes: list[SchemaChangeStatus]
    quality: QualityStatus | None
    backfills: list[BackfillStatus]
    verification: VerifyStatus | None = None
    repairs: list[RepairStatus] = []
    """Tables held back now (open repairs)."""


def pipeline_status(section: PipelineSection) -> PipelineStatus:
    """The status of the pipeline ``section`` names, as its state store holds it now (only the
    ``pipeline`` section: the Airflow API server's lag page cannot complete the source)."""
    with StateStore(section.resolved_state_uri) as store:
        return status_in(store, section.name)


def status_in(store: StateStore, name: str) -> PipelineStatus:
    """The status of pipeline ``name`` in an open state store."""
    switch = store.offsets(name).load(SWITCH)
    return PipelineStatus(
        pipeline=name,
        tables=_tables(store, name),
        switch_offset=switch.to_dict() if switch else None,
        stream=_stream(store, name),
        schema_changes=_schema_changes(store, name),
        quality=_quality(store, name),
        backfills=_backfills(store, name),
        verification=_verification(store, name),
        repairs=_repairs(store, name),
    )


def _tables(store: StateStore, pipeline: str) -> list[TableStatus]:
    """The tables the snapshot planned, then those the stream keeps since (created, or renamed in,
    after it: the schema history's)."""
    planned = [_table(p) for p in store.plans(pipeline).load()]
    names = {t.table for t in planned}
    current = store.schema_history(pipeline).current()
    return planned + [
        _streamed(table.name, f"{version.offset} ({version.cause})")
        for table, version in sorted(current.items(), key=lambda item: item[0].name)
        if table.name not in names
    ]


def _streamed(table: str, since: str) -> TableStatus:
    return TableStatus(
        table=table, strategy="streamed", chunks=0, finished_chunks=0, rows=0, max_high_watermark="",
        streamed_since=since,
    )  # fmt: skip


def _table(plan: StoredPlan) -> TableStatus:
    highs = [c.high_watermark for c in plan.chunks if c.high_watermark]
    return TableStatus(
        table=plan.table.name,
        strategy=plan.strategy,
        chunks=len(plan.chunks),
        finished_chunks=plan.finished,
        rows=sum(c.row_count or 0 for c in plan.chunks),
        max_high_watermark=str(max(highs, default="")),
    )


def _stream(store: StateStore, pipeline: str) -> StreamStatus | None:
    """The stream's offset, last batch, lag, and the last time it looked at the source."""
    applied = store.offsets(pipeline).load_record(STREAM)
    if applied is None:
        return None
    head = store.offsets(pipeline).load_record(HEAD)
    batches = store.stream_history(pipeline).batches(limit=1)
    last = batches[0] if batches else None
    lease = store.writers(pipeline).current(str(Command.STREAM))
    running = lease is not None and lease.expires_at > utc_now() and not lease.holder.gone()
    return StreamStatus(
        running=running,
        writer=lease.describe() if lease is not None else None,
        offset=applied[0].to_dict(),
        applied_at=applied[1].isoformat(),
        source_head=head[0].to_dict() if head else None,
        source_checked_at=head[1].isoformat() if head else None,
        caught_up=head is not None and head[0] <= applied[0],
        last_batch=BatchStatus(
            batch_id=last.batch_id,
            rows=last.rows,
            changes=last.changes,
            seconds=round(last.seconds, 3),
            lag_s=last.lag_s,
            finished_at=last.finished_at.isoformat(),
        )
        if last
        else None,
    )


def _schema_changes(store: StateStore, pipeline: str) -> list[SchemaChangeStatus]:
    """The pending schema changes, or else the last few others; oldest first."""
    requests = store.schema_requests(pipeline).all()
    shown = [r for r in requests if r.status == "pending"] or requests[-RECENT:]
    return [
        SchemaChangeStatus(
            offset=_position(r.offset),
            change=describe_change(r.change),
            behavior=r.behavior,
            status=r.status,
            message=r.message,
        )
        for r in shown
    ]


def _quality(store: StateStore, pipeline: str) -> QualityStatus | None:
    """The newest quality run: when, which tables failed, where its report is."""
    results = store.quality(pipeline).results()
    if not results:
        return None
    newest = results[0].run_name
    run = [r for r in results if r.run_name == newest]
    page = next((r.report for r in run if r.report), None)
    return QualityStatus(
        run_name=newest,
        checked_at=max(r.checked_at for r in run).isoformat(timespec="seconds"),
        success=all(r.success for r in run),
        failed=sorted(r.table for r in run if not r.success),
        tables=len(run),
        # a table's page lies under <report folder>/validations/: the run's index is beside it
        report=f"{page.split('/validations/')[0]}/index.html" if page else None,
    )


def _verification(store: StateStore, pipeline: str) -> VerifyStatus | None:
    """The last ``binlake verify``: its verdicts per table, and where the sink drifted."""
    latest = store.verifications(pipeline).latest()
    if latest is None:
        return None
    verify_id, verdicts = latest
    tables: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for v in verdicts:
        tables[v.table][v.status] += 1
    return VerifyStatus(
        verify_id=verify_id,
        tables={t: dict(c) for t, c in tables.items()},
        drifted=[
            f"{v.table} {v.range}: source {v.source_rows} rows, sink {v.sink_rows} rows"
            for v in verdicts
            if v.status == "drifted"
        ],
    )


def _backfills(store: StateStore, pipeline: str) -> list[BackfillStatus]:
    """The last few backfills: their tables and how many units are pending, staged, applied, stale."""
    by_id: dict[str, list[Any]] = defaultdict(list)
    for unit in BackfillLedger(store).units(pipeline):
        by_id[unit.backfill_id].append(unit)
    return [
        BackfillStatus(
            backfill_id=backfill_id,
            tables=sorted({u.table.name for u in units}),
            units=unit_counts(units),
            rows=sum(u.rows for u in units),
        )
        for backfill_id, units in list(by_id.items())[-RECENT:]
    ]


def stream_problems(status: PipelineStatus, max_lag_s: float | None) -> list[str]:
    """Why a script watching the stream should be told (``binlake status --max-lag``): none when it
    runs and is no further behind than ``max_lag_s``."""
    stream = status.stream
    if stream is None:
        return [f"pipeline `{status.pipeline}` has no stream yet (run `binlake stream`)"]
    problems = [] if stream.running else [f"the stream of `{status.pipeline}` is not running"]
    lag = stream.lag_s
    if max_lag_s is not None and lag is not None and lag > max_lag_s:
        problems.append(
            f"the stream of `{status.pipeline}` is {lag:.0f} s behind (more than {max_lag_s:g} s)"
        )
    if status.repairs:
        held = ", ".join(r.table for r in status.repairs)
        problems.append(f"tables held back by a gap: {held}")
    return problems


def _repairs(store: StateStore, pipeline: str) -> list[RepairStatus]:
    return [
        RepairStatus(
            table=r.table.name,
            since=_position(r.offset),
            reason=r.reason,
            backfill_id=r.backfill_id,
            healing=r.backfill_id.startswith(HEAL_PREFIX),
        )
        for r in RepairLedger(store, pipeline).repairs(status="open")
    ]


def _position(offset: BinlogOffset) -> str:
    return f"{offset.file}:{offset.pos}"
