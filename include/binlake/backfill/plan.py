"""Planning a backfill: which tables and key range, split again into units (no Spark needed)."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from binlake.backfill import BackfillError
from binlake.config import PipelineConfig
from binlake.events import CreateTable, TableId
from binlake.planner import discover_tables
from binlake.source.chunks.splitter import ChunkKeyError, ChunkRange, ChunkSplitter, choose_key_column
from binlake.source.server.connection import connect
from binlake.source.server.discovery import TableSelector
from binlake.state.backfills import BackfillLedger, BackfillUnit
from binlake.state.offset_names import STREAM, SWITCH
from binlake.state.store import StateStore, StoredPlan
from binlake.state.tables import utc_now

log = logging.getLogger(__name__)

#: Units per Spark job, per unit of parallelism: enough to balance, few enough to hand over often.
UNITS_PER_SLOT = 2


@dataclass(frozen=True)
class KeyRange:
    """The chunk-key range ``[start, end)`` a backfill re-reads (None: unbounded)."""

    start: int | None = None
    end: int | None = None

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise BackfillError(
                f"The key range [{self.start}, {self.end}) is empty: `from` must be below `to`."
            )

    @property
    def is_all(self) -> bool:
        return self.start is None and self.end is None


def plan_backfill(
    config: PipelineConfig,
    backfill_id: str,
    tables: Sequence[str] | None = None,
    key_range: KeyRange | None = None,
    chunk_size: int | None = None,
) -> list[BackfillUnit]:
    """The units of backfill ``backfill_id``: planned now if it is new (no Spark needed).

    Raises:
        BackfillError: the pipeline cannot take this backfill now (saying why and what to do).
    """
    with StateStore(config.pipeline.resolved_state_uri) as store:
        ledger = BackfillLedger(store)
        units = ledger.units(config.pipeline.name, backfill_id)
        if units:
            return units  # a rerun resumes
        schemas = {s.table: s for s in discover_tables(config)}
        return _plan(config, store, ledger, backfill_id, schemas, tables, key_range or KeyRange(), chunk_size)


def _plan(
    config: PipelineConfig,
    store: StateStore,
    ledger: BackfillLedger,
    backfill_id: str,
    schemas: dict[TableId, CreateTable],
    tables: Sequence[str] | None,
    key_range: KeyRange,
    chunk_size: int | None,
) -> list[BackfillUnit]:
    name = config.pipeline.name
    plans = checked_plans(config, store, schemas, tables, key_range)
    split: dict[TableId, list[ChunkRange]] = {}
    rows: dict[TableId, int] = {}  # each table's rows per chunk
    with contextlib.closing(connect(config.source)) as conn:
        splitter = ChunkSplitter.of(conn, config.source, chunk_size)
        for stored in plans:
            chunks = splitter.split(schemas[stored.table], stored.key_column).chunks
            split[stored.table] = [r for r in (clip(c.range, key_range) for c in chunks) if r is not None]
            rows[stored.table] = splitter.chunk_size
    # Units small enough for the stream to hold (unit_rows) and many enough to keep every Spark
    # slot busy, like the snapshot's groups.
    total = sum(len(r) for r in split.values())
    slots = max(1, config.pipeline.parallelism * UNITS_PER_SLOT)
    units: list[tuple[TableId, str, list[ChunkRange]]] = []
    for stored in plans:
        ranges = split[stored.table]
        per_unit = max(
            1,
            min(
                config.pipeline.snapshot_chunks_per_task,
                config.backfill.unit_rows // rows[stored.table],
                math.ceil(total / slots),
            ),
        )
        for i in range(0, len(ranges), per_unit):
            units.append((stored.table, stored.key_column, ranges[i : i + per_unit]))
    if not units:
        raise BackfillError(
            f"Nothing to backfill in pipeline `{name}`: no table of it can be (see the warnings above)."
        )
    ledger.create(name, backfill_id, units)
    log.info(
        "backfill %s: %d chunks of %s in %d units",
        backfill_id, sum(len(r) for _, _, r in units), ", ".join(p.table.name for p in plans), len(units),
    )  # fmt: skip
    return ledger.units(name, backfill_id)


def checked_plans(
    config: PipelineConfig,
    store: StateStore,
    schemas: dict[TableId, CreateTable],
    tables: Sequence[str] | None,
    key_range: KeyRange,
    action: str = "backfill",
) -> list[StoredPlan]:
    """The planned tables to ``action`` (backfill, verify: both compare the sink's rows with the
    chunks of a key range), refused (saying why and what to do) unless it can be done."""
    name = config.pipeline.name
    plans = store.plans(name).load()
    unfinished = bool(plans) and store.offsets(name).load(SWITCH) is None
    # An online schema-change tool's shadow table is its table's, checked once the tool is done.
    selector = TableSelector(config.source.tables, config.source.tables_exclude)
    shadows = {t for t in schemas if selector.shadow_of(t) is not None}
    planned = {p.table for p in plans} | shadows
    # A pipeline that streams without a snapshot (`startup_mode` other than `initial`) keeps the
    # tables its stream began with or met.
    plans = [*plans, *streamed_since(store, name, schemas, planned)] if not unfinished else []
    if not plans:
        raise BackfillError(
            f"Pipeline `{name}` has no finished snapshot: {action} works on tables the stream keeps. "
            "Fix: run `binlake snapshot` (and the stream) first."
        )
    known = {p.table.name: p for p in plans}
    unknown = sorted(set(tables or ()) - known.keys())
    if unknown:
        raise BackfillError(
            f"Cannot {action} {unknown}: not tables of the pipeline; its tables: {sorted(known)}."
        )
    chosen = [known[t] for t in tables] if tables else plans
    streamed = store.offsets(name).load(STREAM)
    skipped = []
    keys: dict[TableId, str] = {}
    for stored in chosen:
        schema = schemas.get(stored.table)
        if schema is None and not tables:
            skipped.append(stored)  # all tables asked for: one dropped since the plan is named, not fatal
            log.warning("%s leaves %s out: the table no longer exists in the source", action, stored.table)
            continue
        if schema is None:
            raise BackfillError(f"Cannot {action} {stored.table}: the table no longer exists in the source.")
        # A keyed table splits by its primary key as it is now (a key change since the plan moved
        # it: the sink merges, and a backfill clears ranges, on the new one).
        configured = dict(config.source.chunk_key_columns).get(stored.table.name)
        try:
            column = choose_key_column(
                schema, configured or (None if schema.primary_key else stored.key_column or None)
            )
        except ChunkKeyError as e:
            if tables:
                raise
            skipped.append(stored)  # a keyless table the stream created, with no chunk key set
            log.warning("%s leaves %s out: %s", action, stored.table, e)
            continue
        keys[stored.table] = column.name
        # A verification takes such a table whole, as one chunk: no row needs placing in a range.
        text = column.is_text and not (action == "verify" and key_range.is_all)
        if text and not tables:
            skipped.append(stored)  # all tables asked for: the ones that cannot be are named, not fatal
            log.warning(
                "%s leaves %s out: its chunk key `%s` is text (%s), which the stream cannot compare "
                "in the column's collation; re-snapshot it instead", action, stored.table, column.name,
                column.column_type,
            )  # fmt: skip
            continue
        if text:
            raise BackfillError(
                f"Cannot {action} {stored.table}: its chunk key `{column.name}` is text "
                f"({column.column_type}), and the stream cannot tell which stored rows lie in a chunk "
                "without the server's collation. Fix: re-snapshot the table instead "
                "(`binlake plan --replan` then `binlake snapshot`)."
            )
        if not key_range.is_all and not column.is_integral:
            raise BackfillError(
                f"Cannot {action} a key range of {stored.table}: its chunk key `{column.name}` is "
                f"{column.column_type}, and ranges are given as integers. Fix: {action} the whole table."
            )
        marks = [c.high_watermark for c in stored.chunks if c.high_watermark is not None]
        if marks and (streamed is None or streamed < max(marks)):
            raise BackfillError(
                f"Cannot {action} {stored.table} yet: the stream has not passed its snapshot (chunks read "
                f"up to {max(marks)}; the stream is at {streamed or 'its start'}). Fix: run the stream "
                "(`binlake stream --until-caught-up`) first."
            )
    return [replace(p, key_column=keys[p.table]) for p in chosen if p not in skipped]


def streamed_since(
    store: StateStore, pipeline: str, schemas: dict[TableId, CreateTable], planned: set[TableId]
) -> list[StoredPlan]:
    """Tables the stream keeps that the snapshot did not plan: created, or renamed into their
    name, after it (their rows came from the stream alone). They are the pipeline's as much as
    the planned ones: as plans without chunks, keyed like a new plan would be."""
    current = store.schema_history(pipeline).current()
    found = []
    for table, version in sorted(current.items(), key=lambda item: item[0].name):
        if table in planned or table not in schemas:
            continue
        why = f"streamed since {version.offset} ({version.cause})"
        found.append(
            StoredPlan(table, _key_name(schemas[table]), "single", why, 0, None, None, utc_now(), ())
        )
    return found


def _key_name(schema: CreateTable) -> str:
    """The first key column. A table without a key that the stream created (``CREATE TABLE …
    SELECT`` copies no key) is split by a column of ordered values — an integer's, else any but
    text (ranges of text need the server's collation) — as a configured chunk key would split it
    (NULLs in the first chunk); none such: no key (``checked_plans`` takes the configured one, or
    leaves the table out)."""
    if schema.primary_key:
        return schema.primary_key[0]
    ordered = [c for c in schema.columns if c.is_integral] + [c for c in schema.columns if not c.is_text]
    return ordered[0].name if ordered else ""


def clip(chunk: ChunkRange, key_range: KeyRange) -> ChunkRange | None:
    """``chunk`` ∩ ``key_range`` (None when empty)."""
    if key_range.is_all:
        return chunk
    start, end = chunk.start, chunk.end
    if key_range.start is not None and (start is None or start < key_range.start):
        start = key_range.start
    if key_range.end is not None and (end is None or end > key_range.end):
        end = key_range.end
    if start is not None and end is not None and start >= end:
        return None
    return ChunkRange(start, end)


def new_backfill_id() -> str:
    """A fresh, sortable backfill id."""
    return dt.datetime.now(dt.UTC).strftime("backfill-%Y%m%dT%H%M%S%fZ")
