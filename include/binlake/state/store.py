"""The state store: what binlake has planned and done, in a SQL database through SQLAlchemy.

SQLite under ``work_dir`` by default, Postgres at scale (``pipeline.state_uri``). Every method is
one transaction, so a crash leaves either the old state or the new one, never half of a plan.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    create_engine,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError

from binlake.errors import BinlakeError
from binlake.events import (
    CreateTable,
    SchemaChange,
    TableId,
    change_from_dict,
    change_to_dict,
    table_from_dict,
    table_to_dict,
)
from binlake.offsets import BinlogOffset
from binlake.source.chunk_splitter import Chunk, ChunkRange, SplitPlan, Strategy
from binlake.state.codec import decode_key, encode_key

ChunkStatus = Literal["planned", "finished"]

metadata = MetaData()

plans_table = Table(
    "binlake_plans",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("key_column", String(200), nullable=False),
    Column("strategy", String(20), nullable=False),
    Column("reason", Text, nullable=False),
    Column("chunk_count", Integer, nullable=False),
    Column("estimated_rows", BigInteger, nullable=False),
    Column("min_key", Text),
    Column("max_key", Text),
    Column("planned_at", DateTime(timezone=True), nullable=False),
)

chunks_table = Table(
    "binlake_chunks",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("chunk_id", Integer, primary_key=True),
    Column("key_column", String(200), nullable=False),
    Column("start_key", Text),
    Column("end_key", Text),
    Column("status", String(20), nullable=False, default="planned"),
    Column("low_watermark", Text),
    Column("high_watermark", Text),
    Column("row_count", BigInteger),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)


offsets_table = Table(
    "binlake_offsets",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("offset", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

leases_table = Table(
    "binlake_leases",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("acquired_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)


stream_batches_table = Table(
    "binlake_stream_batches",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("run_id", String(64), primary_key=True),
    Column("batch_id", BigInteger, primary_key=True),
    Column("end_offset", Text, nullable=False),
    Column("changes", Text, nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("seconds", Float, nullable=False),
    Column("lag_s", Float),
    Column("finished_at", DateTime(timezone=True), nullable=False),
)

schema_history_table = Table(
    "binlake_schema_history",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("at", BigInteger, primary_key=True),
    Column("offset", Text, nullable=False),
    Column("schema", Text),  # null: the table does not exist (dropped, renamed away) from here on
    Column("cause", Text, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
)

schema_changes_table = Table(
    "binlake_schema_changes",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("at", BigInteger, primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("offset", Text, nullable=False),
    Column("table_name", String(400), nullable=False),
    Column("change", Text, nullable=False),
    Column("behavior", String(20), nullable=False),
    Column("status", String(20), nullable=False),
    Column("message", Text),
    Column("requested_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
)

quality_results_table = Table(
    "binlake_quality_results",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("run_name", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("success", Boolean, nullable=False),
    Column("results", Text, nullable=False),
    Column("report", Text),
    Column("checked_at", DateTime(timezone=True), nullable=False),
)

backfill_units_table = Table(
    "binlake_backfill_units",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("backfill_id", String(200), primary_key=True),
    Column("unit_id", Integer, primary_key=True),
    Column("table_name", String(400), nullable=False),
    Column("key_column", String(200), nullable=False),
    Column("chunks", Text, nullable=False),  # JSON: [{start, end, low, high, rows}]
    Column("status", String(20), nullable=False),
    Column("files", Text),  # JSON list of staged Parquet file URIs
    Column("rows", BigInteger),
    Column("message", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

repairs_table = Table(
    "binlake_repairs",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("at", BigInteger, primary_key=True),
    Column("offset", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("backfill_id", String(200), nullable=False),
    Column("status", String(20), nullable=False),  # open, closed
    Column("opened_at", DateTime(timezone=True), nullable=False),
    Column("closed_at", DateTime(timezone=True)),
)

SchemaChangeStatus = Literal["pending", "applied", "ignored", "failed"]


@dataclass(frozen=True)
class QualityResult:
    """One sink table's data-quality check in one run."""

    run_name: str
    table: str
    """The sink table, ``namespace.table``."""
    success: bool
    results: list[dict[str, Any]]
    """Per expectation: ``expectation``, ``kwargs``, ``success``, ``observed``, ``note``."""
    report: str | None
    """The run's Data Docs page (HTML) for this table."""
    checked_at: dt.datetime


#: Batches kept per pipeline in ``binlake_stream_batches`` (older ones are pruned).
STREAM_HISTORY = 10_000


@dataclass(frozen=True)
class SchemaVersion:
    """A table's schema from ``offset`` on (None: the table does not exist there)."""

    table: TableId
    offset: BinlogOffset
    schema: CreateTable | None
    cause: str


@dataclass(frozen=True)
class SchemaChangeRequest:
    """A schema change the stream met, and what became of it (the DDL-apply protocol's record)."""

    offset: BinlogOffset
    seq: int
    """Order among the changes of one statement (``RENAME TABLE a TO b, c TO d``)."""
    table: TableId
    change: SchemaChange
    behavior: str
    status: SchemaChangeStatus
    message: str | None
    requested_at: dt.datetime
    finished_at: dt.datetime | None


class TableBusyError(BinlakeError):
    """Another binlake process holds the table."""

    def __init__(self, message: str, lease: Lease) -> None:
        self.lease = lease
        super().__init__(message)


@dataclass(frozen=True)
class Lease:
    """Who writes (or maintains) a sink table, until when."""

    pipeline: str
    table: str
    holder: str
    acquired_at: dt.datetime
    expires_at: dt.datetime


@dataclass(frozen=True)
class StreamBatch:
    """What one micro-batch of the stream applied."""

    run_id: str
    batch_id: int
    end_offset: BinlogOffset
    changes: dict[str, dict[str, int]]
    """Table → op → rows applied (after filtering and compaction)."""
    rows: int
    """Row changes read in the batch (before filtering and compaction)."""
    seconds: float
    lag_s: float | None
    """Seconds between the newest event's time and the end of the batch."""
    finished_at: dt.datetime


@dataclass(frozen=True)
class ChunkState:
    """A planned chunk and what has happened to it."""

    chunk: Chunk
    status: ChunkStatus
    low_watermark: BinlogOffset | None = None
    high_watermark: BinlogOffset | None = None
    row_count: int | None = None


@dataclass(frozen=True)
class StoredPlan:
    """A table's plan as stored, with its chunks' states."""

    table: TableId
    key_column: str
    strategy: Strategy
    reason: str
    estimated_rows: int
    min_key: Any
    max_key: Any
    planned_at: dt.datetime
    chunks: tuple[ChunkState, ...]

    @property
    def finished(self) -> int:
        return sum(c.status == "finished" for c in self.chunks)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _offset_text(offset: BinlogOffset | None) -> str | None:
    return None if offset is None else json.dumps(offset.to_dict())


def _offset(text: str | None) -> BinlogOffset | None:
    return None if text is None else BinlogOffset.from_dict(json.loads(text))


class StateStore:
    """binlake's metadata tables in one SQL database (created on first use)."""

    def __init__(self, uri: str) -> None:
        url = make_url(uri)
        if url.drivername.startswith("sqlite") and url.database:
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(uri, future=True)
        _create_tables(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # -- plans -----------------------------------------------------------------------------------

    def save_plans(self, pipeline: str, plans: Sequence[SplitPlan]) -> None:
        """Store (or replace) the plans of these tables, all in one transaction."""
        now = _now()
        with self.engine.begin() as conn:
            for plan in plans:
                where_plan = and_(
                    plans_table.c.pipeline == pipeline, plans_table.c.table_name == plan.table.name
                )
                where_chunks = and_(
                    chunks_table.c.pipeline == pipeline, chunks_table.c.table_name == plan.table.name
                )
                conn.execute(delete(chunks_table).where(where_chunks))
                conn.execute(delete(plans_table).where(where_plan))
                conn.execute(
                    insert(plans_table).values(
                        pipeline=pipeline,
                        table_name=plan.table.name,
                        key_column=plan.key_column,
                        strategy=plan.strategy,
                        reason=plan.reason,
                        chunk_count=len(plan.chunks),
                        estimated_rows=plan.estimated_rows,
                        min_key=encode_key(plan.min_key),
                        max_key=encode_key(plan.max_key),
                        planned_at=now,
                    )
                )
                if plan.chunks:
                    conn.execute(
                        insert(chunks_table),
                        [
                            {
                                "pipeline": pipeline,
                                "table_name": plan.table.name,
                                "chunk_id": c.chunk_id,
                                "key_column": c.key_column,
                                "start_key": encode_key(c.range.start),
                                "end_key": encode_key(c.range.end),
                                "status": "planned",
                                "updated_at": now,
                            }
                            for c in plan.chunks
                        ],
                    )

    def load_plans(self, pipeline: str, tables: Iterable[TableId] | None = None) -> list[StoredPlan]:
        """The stored plans of ``pipeline`` (of the given tables only, if given), by table name."""
        wanted = None if tables is None else {t.name for t in tables}
        with self.engine.connect() as conn:
            plan_rows = conn.execute(
                select(plans_table)
                .where(plans_table.c.pipeline == pipeline)
                .order_by(plans_table.c.table_name)
            ).all()
            chunk_rows = conn.execute(
                select(chunks_table)
                .where(chunks_table.c.pipeline == pipeline)
                .order_by(chunks_table.c.table_name, chunks_table.c.chunk_id)
            ).all()
        by_table: dict[str, list[ChunkState]] = {}
        for row in chunk_rows:
            table = TableId.parse(row.table_name)
            chunk = Chunk(
                table,
                row.chunk_id,
                row.key_column,
                ChunkRange(decode_key(row.start_key), decode_key(row.end_key)),
            )
            by_table.setdefault(row.table_name, []).append(
                ChunkState(
                    chunk, row.status, _offset(row.low_watermark), _offset(row.high_watermark), row.row_count
                )
            )
        return [
            StoredPlan(
                TableId.parse(row.table_name),
                row.key_column,
                row.strategy,
                row.reason,
                row.estimated_rows,
                decode_key(row.min_key),
                decode_key(row.max_key),
                row.planned_at,
                tuple(by_table.get(row.table_name, ())),
            )
            for row in plan_rows
            if wanted is None or row.table_name in wanted
        ]

    def finish_chunk(
        self, pipeline: str, chunk: Chunk, low: BinlogOffset | None, high: BinlogOffset, row_count: int
    ) -> None:
        """Record that ``chunk`` was read (and committed) at these watermarks."""
        self.finish_chunks(pipeline, [(chunk.table, chunk.chunk_id, low, high, row_count)])

    def finish_chunks(
        self, pipeline: str, chunks: Sequence[tuple[TableId, int, BinlogOffset | None, BinlogOffset, int]]
    ) -> None:
        """Record several finished chunks (table, chunk id, low, high, rows) in one transaction."""
        now = _now()
        with self.engine.begin() as conn:
            for table, chunk_id, low, high, row_count in chunks:
                result = conn.execute(
                    update(chunks_table)
                    .where(
                        chunks_table.c.pipeline == pipeline,
                        chunks_table.c.table_name == table.name,
                        chunks_table.c.chunk_id == chunk_id,
                    )
                    .values(
                        status="finished",
                        low_watermark=_offset_text(low),
                        high_watermark=_offset_text(high),
                        row_count=row_count,
                        updated_at=now,
                    )
                )
                if result.rowcount != 1:
                    raise KeyError(
                        f"chunk {table.table}#{chunk_id} of pipeline `{pipeline}` is not in the plan"
                    )

    # -- offsets -----------------------------------------------------------------------------------

    def save_offset(self, pipeline: str, name: str, offset: BinlogOffset) -> None:
        """Store a named offset (``switch``: where the stream starts after the snapshot)."""
        with self.engine.begin() as conn:
            conn.execute(
                delete(offsets_table).where(
                    offsets_table.c.pipeline == pipeline, offsets_table.c.name == name
                )
            )
            conn.execute(
                insert(offsets_table).values(
                    pipeline=pipeline, name=name, offset=_offset_text(offset), updated_at=_now()
                )
            )

    def load_offset(self, pipeline: str, name: str) -> BinlogOffset | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(offsets_table.c.offset).where(
                    offsets_table.c.pipeline == pipeline, offsets_table.c.name == name
                )
            ).first()
        return None if row is None else _offset(row[0])

    def load_offset_record(self, pipeline: str, name: str) -> tuple[BinlogOffset, dt.datetime] | None:
        """A named offset with the time it was stored."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(offsets_table.c.offset, offsets_table.c.updated_at).where(
                    offsets_table.c.pipeline == pipeline, offsets_table.c.name == name
                )
            ).first()
        if row is None:
            return None
        offset = _offset(row[0])
        assert offset is not None
        return offset, _aware(row[1])

    def save_note(self, pipeline: str, name: str, note: dict[str, Any]) -> None:
        """Store a small named document beside the offsets (``stream.binlog``: the identity of the
        binlog the stream's offset is in)."""
        with self.engine.begin() as conn:
            key = f"note:{name}"
            conn.execute(
                delete(offsets_table).where(offsets_table.c.pipeline == pipeline, offsets_table.c.name == key)
            )
            conn.execute(
                insert(offsets_table).values(
                    pipeline=pipeline, name=key, offset=json.dumps(note), updated_at=_now()
                )
            )

    def load_note(self, pipeline: str, name: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(offsets_table.c.offset).where(
                    offsets_table.c.pipeline == pipeline, offsets_table.c.name == f"note:{name}"
                )
            ).first()
        return None if row is None else dict(json.loads(row[0]))

    def delete_offset(self, pipeline: str, name: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                delete(offsets_table).where(
                    offsets_table.c.pipeline == pipeline, offsets_table.c.name == name
                )
            )

    # -- stream ------------------------------------------------------------------------------------

    def record_stream_batch(self, pipeline: str, batch: StreamBatch, offset_name: str) -> None:
        """Record a finished micro-batch and move the stream's named offset to its end, together."""
        with self.engine.begin() as conn:
            conn.execute(
                delete(stream_batches_table).where(
                    stream_batches_table.c.pipeline == pipeline,
                    stream_batches_table.c.run_id == batch.run_id,
                    stream_batches_table.c.batch_id == batch.batch_id,
                )
            )
            conn.execute(
                insert(stream_batches_table).values(
                    pipeline=pipeline,
                    run_id=batch.run_id,
                    batch_id=batch.batch_id,
                    end_offset=_offset_text(batch.end_offset),
                    changes=json.dumps(batch.changes, sort_keys=True),
                    rows=batch.rows,
                    seconds=batch.seconds,
                    lag_s=batch.lag_s,
                    finished_at=batch.finished_at,
                )
            )
            conn.execute(
                delete(offsets_table).where(
                    offsets_table.c.pipeline == pipeline, offsets_table.c.name == offset_name
                )
            )
            conn.execute(
                insert(offsets_table).values(
                    pipeline=pipeline,
                    name=offset_name,
                    offset=_offset_text(batch.end_offset),
                    updated_at=batch.finished_at,
                )
            )
            kept = (
                select(stream_batches_table.c.finished_at)
                .where(stream_batches_table.c.pipeline == pipeline)
                .order_by(stream_batches_table.c.finished_at.desc())
                .offset(STREAM_HISTORY)
                .limit(1)
            )
            oldest_kept = conn.execute(kept).scalar()
            if oldest_kept is not None:
                conn.execute(
                    delete(stream_batches_table).where(
                        stream_batches_table.c.pipeline == pipeline,
                        stream_batches_table.c.finished_at <= oldest_kept,
                    )
                )

    def stream_batches(self, pipeline: str, limit: int = 100) -> list[StreamBatch]:
        """The newest recorded micro-batches, newest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(stream_batches_table)
                .where(stream_batches_table.c.pipeline == pipeline)
                .order_by(stream_batches_table.c.finished_at.desc(), stream_batches_table.c.batch_id.desc())
                .limit(limit)
            ).all()
        batches = []
        for row in rows:
            end = _offset(row.end_offset)
            assert end is not None
            batches.append(
                StreamBatch(
                    row.run_id,
                    row.batch_id,
                    end,
                    json.loads(row.changes),
                    row.rows,
                    row.seconds,
                    row.lag_s,
                    _aware(row.finished_at),
                )
            )
        return batches

    # -- schema history --------------------------------------------------------------------------

    def record_schema(
        self, pipeline: str, table: TableId, offset: BinlogOffset, schema: CreateTable | None, cause: str
    ) -> None:
        """Store ``table``'s schema from ``offset`` on (idempotent: a replay records it once)."""
        values = {
            "pipeline": pipeline,
            "table_name": table.name,
            "at": _sortable(offset),
            "offset": _offset_text(offset),
            "schema": None if schema is None else json.dumps(table_to_dict(schema)),
            "cause": cause,
            "recorded_at": _now(),
        }
        with self.engine.begin() as conn:
            key = and_(
                schema_history_table.c.pipeline == pipeline,
                schema_history_table.c.table_name == table.name,
                schema_history_table.c.at == values["at"],
            )
            conn.execute(delete(schema_history_table).where(key))
            conn.execute(insert(schema_history_table).values(**values))

    def schema_at(self, pipeline: str, table: TableId, offset: BinlogOffset) -> SchemaVersion | None:
        """The version of ``table`` in force at ``offset`` (None: no version recorded up to there)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(schema_history_table)
                .where(
                    schema_history_table.c.pipeline == pipeline,
                    schema_history_table.c.table_name == table.name,
                    schema_history_table.c.at <= _sortable(offset),
                )
                .order_by(schema_history_table.c.at.desc())
                .limit(1)
            ).first()
        return None if row is None else _version(table, row)

    def schema_versions(self, pipeline: str, table: TableId | None = None) -> list[SchemaVersion]:
        """Every recorded version (of one table, or of all), oldest first."""
        query = select(schema_history_table).where(schema_history_table.c.pipeline == pipeline)
        if table is not None:
            query = query.where(schema_history_table.c.table_name == table.name)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(schema_history_table.c.at)).all()
        return [_version(TableId.parse(r.table_name), r) for r in rows]

    def delete_schema_history(self, pipeline: str) -> None:
        """Forget every version (a new snapshot starts a new history)."""
        with self.engine.begin() as conn:
            conn.execute(delete(schema_history_table).where(schema_history_table.c.pipeline == pipeline))

    # -- schema change requests --------------------------------------------------------------------

    def request_schema_change(
        self, pipeline: str, offset: BinlogOffset, seq: int, change: SchemaChange, behavior: str
    ) -> SchemaChangeRequest:
        """Record a schema change as pending, or return the record already there (a replay)."""
        existing = self.schema_change(pipeline, offset, seq)
        if existing is not None:
            return existing
        with self.engine.begin() as conn:
            conn.execute(
                insert(schema_changes_table).values(
                    pipeline=pipeline,
                    at=_sortable(offset),
                    seq=seq,
                    offset=_offset_text(offset),
                    table_name=change.table.name,
                    change=json.dumps(change_to_dict(change)),
                    behavior=behavior,
                    status="pending",
                    requested_at=_now(),
                )
            )
        found = self.schema_change(pipeline, offset, seq)
        assert found is not None
        return found

    def finish_schema_change(
        self, pipeline: str, offset: BinlogOffset, seq: int, status: SchemaChangeStatus, message: str | None
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(schema_changes_table)
                .where(
                    schema_changes_table.c.pipeline == pipeline,
                    schema_changes_table.c.at == _sortable(offset),
                    schema_changes_table.c.seq == seq,
                )
                .values(status=status, message=message, finished_at=_now())
            )

    def schema_changes(
        self, pipeline: str, status: SchemaChangeStatus | None = None
    ) -> list[SchemaChangeRequest]:
        """Schema change requests in binlog order (only those with ``status``, if given)."""
        query = select(schema_changes_table).where(schema_changes_table.c.pipeline == pipeline)
        if status is not None:
            query = query.where(schema_changes_table.c.status == status)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(schema_changes_table.c.at, schema_changes_table.c.seq)).all()
        return [_request(r) for r in rows]

    def schema_change(self, pipeline: str, offset: BinlogOffset, seq: int) -> SchemaChangeRequest | None:
        """One schema change request (None: there is none at ``offset``/``seq``)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(schema_changes_table).where(
                    schema_changes_table.c.pipeline == pipeline,
                    schema_changes_table.c.at == _sortable(offset),
                    schema_changes_table.c.seq == seq,
                )
            ).first()
        return None if row is None else _request(row)

    # -- leases ------------------------------------------------------------------------------------

    def acquire_lease(self, pipeline: str, table: str, holder: str, ttl: dt.timedelta) -> Lease:
        """Take (or renew) the lease on a sink table for ``ttl``.

        A lease that has expired is taken over: its holder is gone (crashed) or late.

        Raises:
            TableBusyError: another holder's lease is live.
        """
        now = _now()
        with self.engine.begin() as conn:
            row = conn.execute(
                select(leases_table).where(
                    leases_table.c.pipeline == pipeline, leases_table.c.table_name == table
                )
            ).first()
            if row is not None:
                current = Lease(
                    row.pipeline, row.table_name, row.holder, _aware(row.acquired_at), _aware(row.expires_at)
                )
                if current.holder != holder and current.expires_at > now:
                    raise TableBusyError(
                        f"`{table}` is held by `{current.holder}` since "
                        f"{current.acquired_at:%Y-%m-%d %H:%M:%S} UTC "
                        f"(until {current.expires_at:%Y-%m-%d %H:%M:%S} UTC unless renewed).",
                        current,
                    )
                conn.execute(
                    delete(leases_table).where(
                        leases_table.c.pipeline == pipeline, leases_table.c.table_name == table
                    )
                )
            lease = Lease(pipeline, table, holder, now, now + ttl)
            try:
                conn.execute(
                    insert(leases_table).values(
                        pipeline=pipeline,
                        table_name=table,
                        holder=holder,
                        acquired_at=now,
                        expires_at=lease.expires_at,
                    )
                )
            except IntegrityError:
                raise TableBusyError(f"`{table}` was taken by another process just now.", lease) from None
        return lease

    def release_lease(self, pipeline: str, table: str, holder: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                delete(leases_table).where(
                    leases_table.c.pipeline == pipeline,
                    leases_table.c.table_name == table,
                    leases_table.c.holder == holder,
                )
            )

    # -- data quality ------------------------------------------------------------------------------

    def record_quality(self, pipeline: str, result: QualityResult) -> None:
        """Keep one table's check of one run (a rerun of the run replaces it)."""
        with self.engine.begin() as conn:
            conn.execute(
                delete(quality_results_table).where(
                    quality_results_table.c.pipeline == pipeline,
                    quality_results_table.c.run_name == result.run_name,
                    quality_results_table.c.table_name == result.table,
                )
            )
            conn.execute(
                insert(quality_results_table).values(
                    pipeline=pipeline,
                    run_name=result.run_name,
                    table_name=result.table,
                    success=result.success,
                    results=json.dumps(result.results, default=str),
                    report=result.report,
                    checked_at=result.checked_at,
                )
            )

    def quality_results(self, pipeline: str, run_name: str | None = None) -> list[QualityResult]:
        """The checks of one run (or of every run), newest first."""
        query = select(quality_results_table).where(quality_results_table.c.pipeline == pipeline)
        if run_name is not None:
            query = query.where(quality_results_table.c.run_name == run_name)
        query = query.order_by(quality_results_table.c.checked_at.desc(), quality_results_table.c.table_name)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            QualityResult(
                r.run_name, r.table_name, bool(r.success), json.loads(r.results), r.report,
                _aware(r.checked_at),
            )
            for r in rows
        ]  # fmt: skip


def _create_tables(engine: Engine, attempts: int = 5) -> None:
    """Create binlake's tables if missing. Several processes may do so at once (the stream's driver
    and its source both open the store); the loser of that race sees "already exists" and checks
    again."""
    for attempt in range(attempts):
        try:
            metadata.create_all(engine)
            return
        except DBAPIError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


def _aware(value: dt.datetime) -> dt.datetime:
    # SQLite hands back naive datetimes even for timezone-aware columns; they were stored in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def _sortable(offset: BinlogOffset) -> int:
    """The offset as one integer that sorts like offsets (file sequence number, then position)."""
    return offset.sequence << 32 | offset.pos


def _version(table: TableId, row: Any) -> SchemaVersion:
    offset = _offset(row.offset)
    assert offset is not None
    schema = None if row.schema is None else table_from_dict(json.loads(row.schema))
    return SchemaVersion(table, offset, schema, row.cause)


def _request(row: Any) -> SchemaChangeRequest:
    offset = _offset(row.offset)
    assert offset is not None
    return SchemaChangeRequest(
        offset,
        row.seq,
        TableId.parse(row.table_name),
        change_from_dict(json.loads(row.change)),
        row.behavior,
        row.status,
        row.message,
        _aware(row.requested_at),
        None if row.finished_at is None else _aware(row.finished_at),
    )
