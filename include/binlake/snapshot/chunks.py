"""Which chunks a snapshot run reads, grouped into Spark tasks; chunks an earlier run committed."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.sink.writer import IcebergWriter
from binlake.snapshot import SnapshotError
from binlake.source.chunks.splitter import ChunkId
from binlake.state.codec import encode_key
from binlake.state.store import ChunkState, StateStore, StoredPlan

log = logging.getLogger(__name__)

#: Tasks per wave, per unit of parallelism: enough to balance, few enough to commit often.
TASKS_PER_SLOT = 4


def planned(store: StateStore, pipeline: str, tables: Sequence[str] | None) -> list[StoredPlan]:
    plans = store.plans(pipeline).load()
    if not plans:
        raise SnapshotError(f"Pipeline `{pipeline}` has no plan. Fix: run `binlake plan` first.")
    if tables:
        known = {p.table.name for p in plans}
        unknown = [t for t in tables if t not in known]
        if unknown:
            raise SnapshotError(f"Tables {unknown} are not in the plan; planned: {', '.join(sorted(known))}.")
        plans = [p for p in plans if p.table.name in tables]
    return plans


def selected(state: ChunkState, wanted: set[str] | None) -> bool:
    return wanted is None or str(state.chunk.id) in wanted


def reconcile(
    store: StateStore, pipeline: str, plans: list[StoredPlan], writers: dict[TableId, IcebergWriter]
) -> int:
    """Mark chunks finished that Iceberg has but the state store does not (returns how many)."""
    recovered: list[tuple[TableId, int, BinlogOffset | None, BinlogOffset, int]] = []
    for plan in plans:
        unfinished = {c.chunk.chunk_id for c in plan.chunks if c.status != "finished"}
        if not unfinished:
            continue
        for commit in writers[plan.table].committed_chunk_commits():
            chunk_id = ChunkId.parse(commit.chunk_id).index
            if chunk_id in unfinished:
                recovered.append(
                    (plan.table, chunk_id, commit.low_watermark, commit.high_watermark, commit.rows)
                )
    if recovered:
        store.plans(pipeline).finish_chunks(recovered)
        log.info(
            "recognised %d chunks committed to Iceberg by an earlier run: not read again", len(recovered)
        )
    return len(recovered)


def chunk_groups(
    pending: list[ChunkState], parallelism: int, chunks_per_task: int
) -> list[list[dict[str, Any]]]:
    """Consecutive chunks of one table per group: at most ``chunks_per_task``, and small enough that
    a small snapshot still keeps every slot busy; a table's runs as even as its chunks allow (36
    chunks in groups of at most 32 make two of 18, not 32 and 4: a slot would wait for the other).

    Each table's last chunk (``[x, +inf)``) is read first: it holds every row inserted since the plan
    until it is read, so on a table growing during its snapshot it is read before the others, not
    after them all (Flink CDC's unbounded-chunk-first). Its groups come first; the others follow
    longest first (chunks hold even rows), so the slots of a Spark job end together. Where the
    snapshot fits in one Spark job, the last chunk heads its table's last run (the chunks before it)
    — a Spark task costs 10-20 ms of scheduling, and a 1M-row snapshot paid one per table for its
    last chunk — and is written to a file of its own, so each file still holds one range of keys;
    otherwise it is a group of its own, and the first job holds every table's (``chunk_waves``).

    Tables of one chunk (smaller than a chunk when planned) share groups, as many as a group holds,
    right after the tails: a task each, a database of many small tables paid a Spark task, a replica
    claim and a connection for every one of them."""
    by_table: dict[str, list[ChunkState]] = defaultdict(list)
    for state in pending:
        by_table[state.chunk.table.name].append(state)
    total = len(pending)
    per_group = max(1, min(chunks_per_task, math.ceil(total / max(1, parallelism * TASKS_PER_SLOT))))
    one_job = total <= job_chunks(parallelism, chunks_per_task)
    tails, small, groups = [], [], []
    for table, states in sorted(by_table.items()):
        if len(states) == 1 and _whole_table(states[0]):
            small.append(_task_chunk(table, states[0]))
            continue
        bounded = [s for s in states if not unbounded(s)]
        last = [s for s in states if unbounded(s)]
        runs = _even_runs(bounded + last if one_job else bounded, per_group)
        if last and one_job:  # the run ending with the last chunk: read from it
            *runs, tail_run = runs
            tails.append([_task_chunk(table, s) for s in [tail_run[-1], *tail_run[:-1]]])
        else:
            tails += [[_task_chunk(table, s)] for s in last]
        groups += [[_task_chunk(table, s) for s in run] for run in runs]
    tails.sort(key=len, reverse=True)  # stable: by table among equals
    groups.sort(key=len, reverse=True)
    return tails + [small[i : i + per_group] for i in range(0, len(small), per_group)] + groups


def job_chunks(parallelism: int, chunks_per_task: int) -> int:
    """The most chunks one Spark job of the snapshot reads: what a crash may lose."""
    return max(1, parallelism * TASKS_PER_SLOT * chunks_per_task)


def chunk_waves(
    groups: list[list[dict[str, Any]]], parallelism: int, chunks_per_task: int
) -> list[list[list[dict[str, Any]]]]:
    """The groups of each Spark job (one commit per table), in order: a job holds at most
    ``parallelism × TASKS_PER_SLOT × chunks_per_task`` chunks — the most a crash can lose — and
    every group that fits under that; the groups headed by a table's last chunk ride in the first
    (beyond that bound only where each is that chunk alone: ``chunk_groups``). Cutting jobs by
    groups instead left a job of one small group on its own (its start paid again, one slot idle):
    a snapshot that fits in one job runs as one."""
    tails = [g for g in groups if g[0]["end"] is None]
    rest = [g for g in groups if g[0]["end"] is not None]
    most = job_chunks(parallelism, chunks_per_task)
    waves: list[list[list[dict[str, Any]]]] = [list(tails)]
    held = 0
    for group in rest:
        if held and held + len(group) > most:
            waves.append([])
            held = 0
        waves[-1].append(group)
        held += len(group)
    return [w for w in waves if w]


def _even_runs(states: list[ChunkState], most: int) -> list[list[ChunkState]]:
    """``states`` in consecutive runs of at most ``most``, their lengths differing by one at most."""
    if not states:
        return []
    runs = math.ceil(len(states) / most)
    base, longer = divmod(len(states), runs)
    found, at = [], 0
    for i in range(runs):
        size = base + (1 if i < longer else 0)
        found.append(states[at : at + size])
        at += size
    return found


def unbounded(state: ChunkState) -> bool:
    """Whether the chunk is its table's last, ``[x, +inf)``: read first (``chunk_groups``)."""
    return state.chunk.range.end is None


def _whole_table(state: ChunkState) -> bool:
    """Whether the chunk is its table's only one: the first, and unbounded."""
    return state.chunk.chunk_id == 0 and unbounded(state)


def _task_chunk(table: str, state: ChunkState) -> dict[str, Any]:
    """A chunk as a snapshot task reads it."""
    chunk = state.chunk
    return {
        "table": table,
        "id": chunk.chunk_id,
        "key": chunk.key_column,
        "start": encode_key(chunk.range.start),
        "end": encode_key(chunk.range.end),
    }
