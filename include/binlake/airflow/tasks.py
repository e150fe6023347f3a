"""The work of the DAGs' Python tasks: each loads the pipeline and calls the package.

Return values are what the tasks push to XCom: small JSON (chunk ids, offsets, summaries), never a
secret. Errors binlake raises on purpose reach the task log as their message.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from binlake.airflow.runtime import load_pipeline
from binlake.errors import BinlakeError

log = logging.getLogger(__name__)

#: Startup modes that begin with a snapshot.
SNAPSHOT_MODES = ("initial", "snapshot")


class TaskFailedError(BinlakeError):
    """A DAG task found something it must not go on with."""


def validate(path: str | Path) -> list[dict[str, Any]]:
    """Check the config and the source; fail naming every error and its fix."""
    from binlake.source.server.validator import has_errors
    from binlake.source.server.validator import validate as checks_of

    config = load_pipeline(path)
    checks = checks_of(config)
    for check in checks:
        log.info("%s %s: %s", check.status, check.name, check.message)
    if has_errors(checks):
        lines = [f"{c.name}: {c.message} (fix: {c.fix})" for c in checks if c.status == "error"]
        raise TaskFailedError("The source is not ready for binlake:\n" + "\n".join(lines))
    return [c.as_dict() for c in checks]


def plan_chunk_groups(path: str | Path, jobs: int) -> list[list[str]]:
    """Plan (or keep the plan), then spread the unfinished chunks over at most ``jobs`` groups of
    consecutive chunks (each table's last chunk in the first): one Spark job each. Finished chunks
    are left out, so a rerun resumes."""
    from binlake.planner import plan
    from binlake.snapshot.chunks import unbounded

    config = load_pipeline(path)
    if config.source.startup_mode not in SNAPSHOT_MODES:
        log.info("startup mode %s: no snapshot", config.source.startup_mode)
        return []
    plans = plan(config)
    states = [
        s for p in sorted(plans, key=lambda p: p.table.name) for s in p.chunks if s.status != "finished"
    ]
    # Each table's last chunk first (a stable sort): it holds the rows inserted until it is read.
    pending = [str(s.chunk.id) for s in sorted(states, key=lambda s: not unbounded(s))]
    size = max(1, math.ceil(len(pending) / max(1, jobs)))
    groups = [pending[i : i + size] for i in range(0, len(pending), size)]
    done = sum(len(p.chunks) for p in plans) - len(pending)
    log.info("%d chunks to read in %d Spark jobs (%d finished before)", len(pending), len(groups), done)
    return groups


def switch(path: str | Path) -> dict[str, Any]:
    """The stream's start: the snapshot's switch offset, once every chunk is finished."""
    from binlake.state.offset_names import SWITCH
    from binlake.state.store import StateStore

    config = load_pipeline(path)
    if config.source.startup_mode not in SNAPSHOT_MODES:
        return {"switch_offset": None, "startup_mode": config.source.startup_mode}
    with StateStore(config.pipeline.resolved_state_uri) as store:
        plans = store.plans(config.pipeline.name).load()
        unfinished = [str(c.chunk.id) for p in plans for c in p.chunks if c.status != "finished"]
        offset = store.offsets(config.pipeline.name).load(SWITCH)
    if unfinished or offset is None:
        raise TaskFailedError(
            f"The snapshot is unfinished: {len(unfinished)} chunks not read (e.g. {unfinished[:3]}). "
            "Fix: clear the failed snapshot tasks (or rerun the DAG): finished chunks are kept."
        )
    log.info("snapshot complete: the stream starts at %s", offset)
    return {
        "switch_offset": offset.to_dict(),
        "tables": len(plans),
        "chunks": sum(len(p.chunks) for p in plans),
    }


def pending_schema_changes(path: str | Path) -> list[dict[str, Any]]:
    """The schema changes the stream waits on, in binlog order (empty: none)."""
    from binlake.events import describe_change
    from binlake.state.store import StateStore

    config = load_pipeline(path)
    with StateStore(config.pipeline.resolved_state_uri) as store:
        pending = store.schema_requests(config.pipeline.name).all("pending")
    return [
        {
            "offset": r.offset.to_dict(),
            "seq": r.seq,
            "table": r.table.name,
            "change": describe_change(r.change),
        }
        for r in pending
    ]  # fmt: skip


def apply_schema_changes(path: str | Path) -> list[str]:
    """Apply every pending schema change in binlog order; return the sink tables they touched.

    Raises:
        TaskFailedError: a change failed under the pipeline's behaviour (the stream stops on it too).
    """
    from binlake.events import RenameTable, describe_change
    from binlake.schema.table_rules import table_rules
    from binlake.state.store import StateStore
    from binlake.stream.schema_changes import apply_request

    config = load_pipeline(path)
    touched: list[str] = []
    with StateStore(config.pipeline.resolved_state_uri) as store:
        for request in store.schema_requests(config.pipeline.name).all("pending"):
            status = apply_request(config, store, request)
            what = f"{describe_change(request.change)} at {request.offset}"
            log.info("schema change %s: %s", what, status)
            if status == "failed":
                found = store.schema_requests(config.pipeline.name).get(request.offset, request.seq)
                reason = found.message if found else "see the stream's log"
                raise TaskFailedError(f"Schema change {what} failed: {reason}")
            change = request.change
            target = change.new_table if isinstance(change, RenameTable) else change.table
            touched += table_rules(config, target).kept_names
    return sorted(set(touched))


def plan_backfill(path: str | Path, backfill_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """Plan backfill ``backfill_id`` from the DAG's form (kept if it exists: a rerun resumes).

    Refusals (no finished snapshot, a stream behind it, text chunk keys with a key range …) fail
    here, before any Spark job starts.
    """
    from binlake.backfill.plan import KeyRange
    from binlake.backfill.plan import plan_backfill as plan
    from binlake.sink.history.companions import sink_tables

    config = load_pipeline(path)
    tables = [t for t in params.get("tables") or [] if t]
    key_range = KeyRange(params.get("key_from"), params.get("key_to"))
    units = plan(config, backfill_id, tables or None, key_range, params.get("chunk_size"))
    source = sorted({u.table.name for u in units})
    log.info("backfill %s: %d chunks of %s in %d Spark tasks", backfill_id,
             sum(len(u.chunks) for u in units), ", ".join(source), len(units))  # fmt: skip
    return {
        "backfill_id": backfill_id,
        "units": len(units),
        "chunks": sum(len(u.chunks) for u in units),
        "tables": source,
        "sink_tables": sorted(sink_tables(config, {u.table for u in units})),
    }


def backfill_applied(path: str | Path, backfill_id: str) -> dict[str, int] | None:
    """How far the stream is with the backfill's units; None until it has applied them all.

    Raises:
        TaskFailedError: a unit went stale (a schema change came first): rerun the DAG run's
            backfill task to read it again.
    """
    from binlake.backfill.progress import unit_counts
    from binlake.state.backfills import BackfillLedger
    from binlake.state.store import StateStore

    config = load_pipeline(path)
    with StateStore(config.pipeline.resolved_state_uri) as store:
        units = BackfillLedger(store).units(config.pipeline.name, backfill_id)
    counts = unit_counts(units)
    log.info("backfill %s: %s", backfill_id, counts)
    stale = [u for u in units if u.status == "stale"]
    if stale:
        raise TaskFailedError(
            f"Backfill {backfill_id}: {len(stale)} units went stale ({stale[0].name}: {stale[0].message}). "
            "Fix: clear the `backfill` task of this run: it reads them again."
        )
    if not units or counts.get("applied", 0) < len(units):
        return None
    return counts


def stage_verify_repair(path: str | Path, verify_id: str, backfill_id: str) -> dict[str, Any] | None:
    """Backfill ``verify_id``'s drifted chunks as ``backfill_id`` (None: nothing drifted)."""
    from binlake.verify.drift_repair import stage_repair, stored_report

    config = load_pipeline(path)
    report = stored_report(config, verify_id)
    drifted = {t.sink for t in report.tables if t.count("drifted")}
    if not drifted:
        return None
    units = stage_repair(config, report, backfill_id)
    log.info("verify %s: %d drifted chunks to repair, backfill %s", verify_id, units, backfill_id)
    return {"backfill_id": backfill_id, "sink_tables": sorted(drifted), "units": units}
