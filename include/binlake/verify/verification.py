"""``binlake verify``: each chunk's checksum on the source equals the sink's at the same position.

Per table: pin the sink (``verify.sink_sums``), split the key range into chunks as the snapshot
does, have the server sum each chunk (``verify.source_sums``), read the sink's rows once, and roll
the sink's sums forward along the binlog to each chunk's position. A chunk is ``equal`` when row
count and hash sum agree, ``drifted`` when not (its key range and both row counts say where), and
``unverified`` when it could not be compared exactly (the note says why and what to do) — never a
guess. Nothing is written to the sink; the results go to the state store.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from binlake.backfill.plan import KeyRange, checked_plans, clip
from binlake.config import PipelineConfig
from binlake.events import Column, CreateTable
from binlake.job_metrics import JobMetrics
from binlake.offsets import BinlogOffset
from binlake.planner import discover_tables
from binlake.quality.checkpoint import sink_offset
from binlake.quality.reconcile import changes_after
from binlake.schema.iceberg_types import identifier_columns
from binlake.schema.routes import SOURCE_TABLE_COLUMN
from binlake.schema.table_rules import table_rules
from binlake.schema.transform_sql import TransformError
from binlake.schema.transforms import Transform, transform_of
from binlake.sink.catalog import open_catalog
from binlake.sink.exactly_once import stream_offset
from binlake.sink.history.changelog import OP
from binlake.sink.history.state_table import StateTable
from binlake.source.binlog.change_reader import SchemaChangedError
from binlake.source.binlog.event_rows import UnreplicableChangeError
from binlake.source.binlog.scan import BinlogPurgedError, binary_logs
from binlake.source.chunks.splitter import ChunkRange, ChunkSplitter, choose_key_column
from binlake.source.server.connection import connect
from binlake.source.server.discovery import same_schema
from binlake.state.offset_names import STREAM, SWITCH
from binlake.state.store import StateStore, StoredPlan
from binlake.state.verifications import ChunkVerdict, Status
from binlake.stream.records import images
from binlake.stream.segments import distance
from binlake.verify.canonical import Hashing, server_hashing
from binlake.verify.changelog_sums import changelog_sums
from binlake.verify.sink_sums import ChunkIndex, PinnedSink, Sums, SumsReader, rolled_forward, sink_sums
from binlake.verify.source_sums import ChunkSum, source_sums

log = logging.getLogger(__name__)

#: Sums of a chunk (MySQL: read between watermarks) before it counts as unverified when writes
#: keep hitting its range while the server sums it.
ATTEMPTS = 5


@dataclass
class TableVerification:
    """One table's verdicts, and what reading it cost."""

    table: str
    sink: str
    key_column: str
    verdicts: list[ChunkVerdict] = field(default_factory=list)
    rows: int = 0
    source_seconds: float = 0.0
    sink_seconds: float = 0.0
    not_compared: list[str] = field(default_factory=list)
    """Source columns the sink table does not have (a schema change behaviour kept them out)."""

    def count(self, status: str) -> int:
        return sum(1 for v in self.verdicts if v.status == status)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sink": self.sink,
            "chunks": len(self.verdicts),
            "equal": self.count("equal"),
            "drifted": [v.as_dict() for v in self.verdicts if v.status == "drifted"],
            "unverified": [v.as_dict() for v in self.verdicts if v.status == "unverified"],
            "repaired": self.count("repaired"),
            "rows": self.rows,
            "source_rows_per_s": round(self.rows / self.source_seconds) if self.source_seconds else None,
            "sink_rows_per_s": round(self.rows / self.sink_seconds) if self.sink_seconds else None,
            **({"not_compared": self.not_compared} if self.not_compared else {}),
        }


@dataclass
class VerifyReport:
    verify_id: str
    pipeline: str
    tables: list[TableVerification] = field(default_factory=list)
    seconds: float = 0.0
    backfill_id: str | None = None

    @property
    def verdicts(self) -> list[ChunkVerdict]:
        return [v for t in self.tables for v in t.verdicts]

    @property
    def clean(self) -> bool:
        """Whether every chunk is equal (or repaired)."""
        return all(v.status in ("equal", "repaired") for v in self.verdicts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verify_id": self.verify_id,
            "pipeline": self.pipeline,
            "clean": self.clean,
            "seconds": round(self.seconds, 2),
            **({"repair_backfill": self.backfill_id} if self.backfill_id else {}),
            "tables": {t.table: t.as_dict() for t in self.tables},
        }


Progress = Callable[[TableVerification], None]


def new_verify_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("verify-%Y%m%dT%H%M%S%fZ")


def verify(
    config: PipelineConfig,
    verify_id: str,
    tables: Sequence[str] | None = None,
    key_range: KeyRange | None = None,
    ranges: dict[str, list[ChunkRange]] | None = None,
    progress: Progress | None = None,
    consistent_snapshot: bool | None = None,
) -> VerifyReport:
    """Verify the chosen tables (all: None) over ``key_range``, or exactly the given ``ranges``
    per table (a repair's second look), and record the verdicts under ``verify_id``.

    Raises:
        BackfillError: a table cannot be verified (not the pipeline's, a text chunk key, the
            stream not past its snapshot), saying why and what to do.
    """
    started = time.monotonic()
    name = config.pipeline.name
    report = VerifyReport(verify_id, name)
    chosen = sorted(ranges) if ranges is not None else tables
    metrics = JobMetrics("verify", name, config.pipeline.metrics_dir)

    def observed(result: TableVerification) -> None:
        # By sink table: a table's history is verified as well as its upsert table.
        verdicts = {s: result.count(s) for s in get_args(Status)}
        metrics.observe({result.sink: result.rows}, {result.sink: verdicts})
        if progress is not None:
            progress(result)

    with metrics.run(), StateStore(config.pipeline.resolved_state_uri) as store:
        reading = _reading(config, consistent_snapshot)
        schemas = {s.table: s for s in discover_tables(config)}
        plans = store.plans(name).load()
        wanted = checked_plans(config, store, schemas, chosen, key_range or KeyRange(), action="verify")
        for stored in wanted:
            schema = schemas[stored.table]
            column = choose_key_column(schema, stored.key_column)
            found = ranges.get(stored.table.name) if ranges is not None else None
            if found is None and column.is_text:
                # The sink's rows cannot be placed in text ranges without the server's collation:
                # the whole table is one chunk (a drift then names the table, not a range).
                found = [ChunkRange.all()]
            chunks = found if found is not None else _split(config, schema, stored, key_range or KeyRange())
            rules = table_rules(config, stored.table)
            result = _verify_table(
                config, store, schema, column.name, chunks, plans, reading, rules.state_name
            )
            store.verifications(name).record(verify_id, result.verdicts)
            report.tables.append(result)
            observed(result)
            # A history's current versions and a changelog's replayed state are the source's rows
            # too (not recorded: the store keeps one verdict per chunk of a source table — its
            # state table's: ``sink/history/state_table.py``).
            for companion in rules.beside_state:
                if companion == rules.history_name and not schema.primary_key:
                    continue  # a table without a key keeps no history
                result = _verify_table(config, store, schema, column.name, chunks, plans, reading, companion)
                report.tables.append(result)
                observed(result)
    report.seconds = time.monotonic() - started
    return report


def _split(
    config: PipelineConfig, schema: CreateTable, stored: StoredPlan, key_range: KeyRange
) -> list[ChunkRange]:
    with contextlib.closing(connect(config.source)) as conn:
        splitter = ChunkSplitter.of(conn, config.source, chunk_bytes=config.verify.chunk_bytes)
        split = splitter.split(schema, stored.key_column)
    return [r for r in (clip(c.range, key_range) for c in split.chunks) if r is not None]


@dataclass(frozen=True)
class SourceReading:
    """How a verification reads the source: in consistent snapshots (None: where the server
    reports their position), and each row's hash (``canonical.server_hashing``)."""

    consistent_snapshot: bool | None
    hashing: Hashing


def _reading(config: PipelineConfig, consistent_snapshot: bool | None) -> SourceReading:
    with contextlib.closing(connect(config.source)) as conn:
        hashing = server_hashing(conn)
    log.info("verify: rows hashed as %s", "CRC-32 and CRC-32C" if hashing == "crc" else "MD5")
    return SourceReading(consistent_snapshot, hashing)


def _verify_table(
    config: PipelineConfig,
    store: StateStore,
    schema: CreateTable,
    key: str,
    ranges: list[ChunkRange],
    plans: Sequence[StoredPlan],
    reading: SourceReading,
    identifier: str | None = None,
) -> TableVerification:
    """Verify one sink table of ``schema`` (its state table, or ``identifier``: its changelog or
    history)."""
    name = config.pipeline.name
    rules = table_rules(config, schema.table)
    identifier = identifier or rules.state_name
    result = TableVerification(schema.table.name, identifier, key)
    pinned = _pin(config, store, identifier)
    sink_columns = set(pinned.table.schema().column_names) if pinned else set()
    refused = None
    try:
        transform = transform_of(rules, schema)
    except TransformError as e:  # the rule no longer fits the table: said below, as unverified
        transform, refused = None, str(e)
    if transform is None:
        columns = [c for c in schema.columns if c.name in sink_columns]
        result.not_compared = [c.name for c in schema.columns if c.name not in sink_columns]
    else:  # the projection's columns, but those computed from metadata the source does not hold
        columns = [
            i.column for i in transform.items if not i.node.uses_metadata and i.column.name in sink_columns
        ]
        result.not_compared = [i.name for i in transform.items if i.column not in columns]
    chunks = ChunkIndex(schema.column(key), ranges)

    def unverified(note: str) -> TableVerification:
        result.verdicts = [
            ChunkVerdict(schema.table.name, key, i, r, "unverified", note=note) for i, r in enumerate(ranges)
        ]
        log.warning("verify %s: %s", schema.table, note)
        return result

    if refused is not None:
        return unverified(refused)
    if pinned is None:
        return unverified(
            f"the sink table {identifier} does not exist or holds no offset yet: run the pipeline first"
        )
    version = store.schema_history(name).at(schema.table, pinned.offset)
    if version is not None and version.schema is not None and not same_schema(version.schema, schema):
        return unverified(
            f"the source's schema of {schema.table} changed after the sink's offset {pinned.offset}: verify "
            "again once the stream has applied the change"
        )
    routed = SOURCE_TABLE_COLUMN in sink_columns
    try:
        # The sink's rows are hashed while the server sums the source's chunks (pinned first, so
        # every source position is at or after the sink's offset).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-sink") as pool:
            clock = time.monotonic()
            summed = _sums_of(config, schema, pinned, reading.hashing)
            sink_side = pool.submit(summed, pinned, schema, columns, key, chunks, routed)
            sink_side.add_done_callback(lambda _: setattr(result, "sink_seconds", time.monotonic() - clock))
            verdicts, rows, seconds = _compare(
                config,
                store,
                schema,
                columns,
                key,
                chunks,
                pinned,
                sink_side.result,
                plans,
                reading,
                transform,
            )
    except SchemaChangedError:
        return unverified(
            f"the schema of {schema.table} changed after the sink's offset {pinned.offset}: verify it again "
            "once the stream has applied the change"
        )
    except UnreplicableChangeError as e:
        return unverified(
            f"after the sink's offset {pinned.offset}, at {e.gap.offset}, the binlog holds {e.gap.reason}: "
            "verify again once the stream is past it"
        )
    except _TooFarError as e:
        return unverified(str(e))
    except BinlogPurgedError as e:
        return unverified(f"the binlog after the sink's offset {pinned.offset} is gone ({e}): run the stream")
    result.verdicts, result.rows, result.source_seconds = verdicts, rows, seconds
    log.info(
        "verify %s: %d chunks, %d equal, %d drifted, %d unverified", schema.table, len(verdicts),
        result.count("equal"), result.count("drifted"), result.count("unverified"),
    )  # fmt: skip
    return result


def _sums_of(config: PipelineConfig, schema: CreateTable, pinned: PinnedSink, hashing: Hashing) -> SumsReader:
    """How the pinned table's rows are summed (each row's hash as ``hashing``): as rows, or (a
    changelog) as the state its changes replay to — by key where an update may be its after image
    alone."""
    if OP not in pinned.table.schema().column_names:
        return functools.partial(sink_sums, hashes_in=config.verify_hashes_dir, hashing=hashing)
    rules = table_rules(config, schema.table)
    rule = rules.changelog
    if rule is None or rule.changelog_updates == "both":
        return functools.partial(changelog_sums, hashing=hashing)
    keys = StateTable(pinned.table, "changelog").keys()  # recorded since the changelog knew them
    catalog = open_catalog(config)
    if not keys and rules.upsert and catalog.table_exists(rules.sink_name):
        keys = identifier_columns(catalog.load_table(rules.sink_name).schema())
    return functools.partial(changelog_sums, keys=keys, hashing=hashing)


class _TooFarError(Exception):
    """The sink is further behind the source than the binlog a verification reads."""


def _pin(config: PipelineConfig, store: StateStore, identifier: str) -> PinnedSink | None:
    """The sink table's current snapshot and the offset it holds the source at (the stream's
    offset is read before the table: see ``quality.checkpoint.sink_offset``)."""
    name = config.pipeline.name
    stream_at = store.offsets(name).load(STREAM)
    catalog = open_catalog(config)
    if not catalog.table_exists(identifier):
        return None
    table = catalog.load_table(identifier)
    offset = sink_offset(stream_at, stream_offset(table), store.offsets(name).load(SWITCH))
    if offset is None:
        return None
    snapshot = table.current_snapshot()
    return PinnedSink(table, snapshot.snapshot_id if snapshot else None, offset)


def _compare(
    config: PipelineConfig,
    store: StateStore,
    schema: CreateTable,
    columns: list[Column],
    key: str,
    chunks: ChunkIndex,
    pinned: PinnedSink,
    base: Callable[[], Sums],
    plans: Sequence[StoredPlan],
    reading: SourceReading,
    transform: Transform | None = None,
) -> tuple[list[ChunkVerdict], int, float]:
    """Sum the chunks on the source and compare; chunks whose sum may or may not hold a change
    (MySQL's watermarks) are summed again."""
    server_id = config.verify.reader_server_id(config.source.server_id.end)
    pending = list(range(len(chunks)))
    sums: dict[int, ChunkSum] = {}
    read_until = pinned.offset
    changes = changes_after(config, store, schema, pinned.offset, pinned.offset, server_id, plans)
    seconds = 0.0
    for attempt in range(1, ATTEMPTS + 1):
        clock = time.monotonic()
        fresh = source_sums(
            config.source, schema, key, [(i, chunks.ranges[i]) for i in pending], config.pipeline.parallelism,
            server_id + 1, reading.consistent_snapshot, columns, transform, reading.hashing,
        )  # fmt: skip
        seconds += time.monotonic() - clock
        end = max(s.high for s in fresh)
        _check_distance(config, schema, pinned.offset, end)
        if end > read_until:
            more = changes_after(config, store, schema, read_until, end, server_id, plans)
            changes = pa.concat_tables([changes, more])
            read_until = end
        settled = [
            s for s in fresh if s.high >= pinned.offset and not _moved_between(changes, s, key, chunks)
        ]
        sums.update({s.index: s for s in settled})
        pending = [s.index for s in fresh if s.index not in sums]
        if not pending:
            break
        log.info("verify %s: %d chunks changed while summed (attempt %d): summing them again", schema.table,
                 len(pending), attempt)  # fmt: skip
    until = [sums[i].high.packed if i in sums else 0 for i in range(len(chunks))]
    counts, totals = rolled_forward(base(), changes, columns, key, chunks, until, transform, reading.hashing)
    verdicts = []
    for i, chunk in enumerate(chunks.ranges):
        s = sums.get(i)
        if s is None:
            note = (
                f"writes hit this range while the server summed it, {ATTEMPTS} times: verify it again later"
            )
            verdicts.append(ChunkVerdict(schema.table.name, key, i, chunk, "unverified", note=note))
            continue
        equal = s.rows == int(counts[i]) and s.total == int(totals[i])
        verdicts.append(
            ChunkVerdict(
                schema.table.name,
                key,
                i,
                chunk,
                "equal" if equal else "drifted",
                s.rows,
                int(counts[i]),
                s.high,
            )
        )
    return verdicts, sum(s.rows for s in sums.values()), seconds


def _moved_between(changes: pa.Table, chunk_sum: ChunkSum, key: str, chunks: ChunkIndex) -> bool:
    """Whether a change of the chunk's range lies between its sum's watermarks (then the sum may
    or may not hold it)."""
    if chunk_sum.low == chunk_sum.high or changes.num_rows == 0:
        return False
    at = changes.column("at")
    window = pc.and_(pc.greater(at, chunk_sum.low.packed), pc.less_equal(at, chunk_sum.high.packed))
    inside = changes.filter(window)
    if inside.num_rows == 0:
        return False
    return bool(np.any(chunks.of(images(inside, [key]).column(key)) == chunk_sum.index))


def _check_distance(
    config: PipelineConfig, schema: CreateTable, start: BinlogOffset, end: BinlogOffset
) -> None:
    with contextlib.closing(connect(config.source)) as conn:
        behind = distance(start, end, dict(binary_logs(conn)))
    if behind > config.quality.max_scan_bytes:
        raise _TooFarError(
            f"the sink of {schema.table} is {behind:,} bytes of binlog behind the source (more than "
            f"quality.max_scan_bytes = {config.quality.max_scan_bytes:,}): run the stream, then verify"
        )
