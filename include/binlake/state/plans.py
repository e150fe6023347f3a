"""A pipeline's snapshot plans: each table's split into chunks, and what became of each chunk."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.engine import Engine

from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import Chunk, ChunkRange, SplitPlan, Strategy
from binlake.state.codec import decode_key, encode_key
from binlake.state.tables import chunks_table, offset_from_text, offset_text, plans_table, utc_now

ChunkStatus = Literal["planned", "finished"]


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


class Plans:
    """The plans of one pipeline (``StateStore.plans``)."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def save(self, plans: Sequence[SplitPlan]) -> None:
        """Store (or replace) the plans of these tables, all in one transaction."""
        now = utc_now()
        with self.engine.begin() as conn:
            for plan in plans:
                where_plan = and_(
                    plans_table.c.pipeline == self.pipeline, plans_table.c.table_name == plan.table.name
                )
                where_chunks = and_(
                    chunks_table.c.pipeline == self.pipeline, chunks_table.c.table_name == plan.table.name
                )
                conn.execute(delete(chunks_table).where(where_chunks))
                conn.execute(delete(plans_table).where(where_plan))
                conn.execute(
                    insert(plans_table).values(
                        pipeline=self.pipeline,
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
                                "pipeline": self.pipeline,
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

    def delete(self, tables: Iterable[TableId]) -> None:
        """Forget the plans (and chunk states) of these tables, in one transaction."""
        names = [t.name for t in tables]
        with self.engine.begin() as conn:
            for table, column in ((chunks_table, chunks_table.c), (plans_table, plans_table.c)):
                conn.execute(
                    delete(table).where(column.pipeline == self.pipeline, column.table_name.in_(names))
                )

    def load(self, tables: Iterable[TableId] | None = None) -> list[StoredPlan]:
        """The stored plans (of the given tables only, if given), by table name."""
        wanted = None if tables is None else {t.name for t in tables}
        with self.engine.connect() as conn:
            plan_rows = conn.execute(
                select(plans_table)
                .where(plans_table.c.pipeline == self.pipeline)
                .order_by(plans_table.c.table_name)
            ).all()
            chunk_rows = conn.execute(
                select(chunks_table)
                .where(chunks_table.c.pipeline == self.pipeline)
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
                    chunk,
                    row.status,
                    offset_from_text(row.low_watermark),
                    offset_from_text(row.high_watermark),
                    row.row_count,
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
        self, chunk: Chunk, low: BinlogOffset | None, high: BinlogOffset, row_count: int
    ) -> None:
        """Record that ``chunk`` was read (and committed) at these watermarks."""
        self.finish_chunks([(chunk.table, chunk.chunk_id, low, high, row_count)])

    def finish_chunks(
        self, chunks: Sequence[tuple[TableId, int, BinlogOffset | None, BinlogOffset, int]]
    ) -> None:
        """Record several finished chunks (table, chunk id, low, high, rows) in one transaction."""
        now = utc_now()
        with self.engine.begin() as conn:
            for table, chunk_id, low, high, row_count in chunks:
                result = conn.execute(
                    update(chunks_table)
                    .where(
                        chunks_table.c.pipeline == self.pipeline,
                        chunks_table.c.table_name == table.name,
                        chunks_table.c.chunk_id == chunk_id,
                    )
                    .values(
                        status="finished",
                        low_watermark=offset_text(low),
                        high_watermark=offset_text(high),
                        row_count=row_count,
                        updated_at=now,
                    )
                )
                if result.rowcount != 1:
                    raise KeyError(
                        f"chunk {table.table}#{chunk_id} of pipeline `{self.pipeline}` is not in the plan"
                    )
