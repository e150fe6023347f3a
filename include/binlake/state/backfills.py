"""The backfill ledger: which key ranges a backfill re-reads, and what became of each.

A backfill splits its tables into chunks and groups consecutive chunks of one table into *units*
(one Spark task each). A unit goes ``pending`` → ``staged`` (its rows are in Parquet files, each
chunk with its watermarks) → ``applied`` (the stream replaced the range with them) — or ``stale``
when a schema change came between its high watermark and the stream (a rerun reads it again).
The stream is the only writer of the sink: the ledger is how the backfill job hands it the units.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import insert, select, update

from binlake.errors import BinlakeError
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import ChunkRange
from binlake.state.codec import decode_key, encode_key
from binlake.state.store import StateStore
from binlake.state.tables import backfill_units_table

UnitStatus = Literal["pending", "staged", "applied", "stale"]
#: Units the backfill job (still) has to read.
TO_READ: tuple[UnitStatus, ...] = ("pending", "stale")


class BackfillExistsError(BinlakeError):
    """A backfill with this id is planned already."""


@dataclass(frozen=True)
class StagedChunk:
    """One chunk of a unit: its range and, once read, its watermarks and row count."""

    range: ChunkRange
    low: BinlogOffset | None = None
    high: BinlogOffset | None = None
    rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": encode_key(self.range.start),
            "end": encode_key(self.range.end),
            "low": self.low.to_dict() if self.low else None,
            "high": self.high.to_dict() if self.high else None,
            "rows": self.rows,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StagedChunk:
        low, high = data.get("low"), data.get("high")
        return cls(
            ChunkRange(decode_key(data["start"]), decode_key(data["end"])),
            BinlogOffset.from_dict(low) if low else None,
            BinlogOffset.from_dict(high) if high else None,
            int(data.get("rows") or 0),
        )


@dataclass(frozen=True)
class BackfillUnit:
    """Consecutive chunks of one table, read by one task and applied by the stream in one commit."""

    backfill_id: str
    unit_id: int
    table: TableId
    key_column: str
    chunks: tuple[StagedChunk, ...]
    status: UnitStatus
    files: tuple[str, ...] = ()
    rows: int = 0
    message: str | None = None
    updated_at: dt.datetime | None = None

    @property
    def high(self) -> BinlogOffset | None:
        """The largest high watermark of its chunks (None until staged)."""
        marks = [c.high for c in self.chunks]
        return None if not marks or any(m is None for m in marks) else max(m for m in marks if m)

    @property
    def name(self) -> str:
        return f"{self.table.name}#{self.backfill_id}/{self.unit_id}"


class BackfillLedger:
    """The ``binlake_backfill_units`` table of a state store."""

    def __init__(self, store: StateStore) -> None:
        self.engine = store.engine

    def create(
        self, pipeline: str, backfill_id: str, units: Sequence[tuple[TableId, str, Sequence[ChunkRange]]]
    ) -> None:
        """Record a new backfill's units (table, chunk key, chunk ranges), all pending, at once."""
        if self.units(pipeline, backfill_id):
            raise BackfillExistsError(f"Backfill `{backfill_id}` of pipeline `{pipeline}` exists already.")
        now = dt.datetime.now(dt.UTC)
        rows = [
            {
                "pipeline": pipeline,
                "backfill_id": backfill_id,
                "unit_id": i,
                "table_name": table.name,
                "key_column": key,
                "chunks": json.dumps([StagedChunk(r).to_dict() for r in ranges]),
                "status": "pending",
                "created_at": now,
                "updated_at": now,
            }
            for i, (table, key, ranges) in enumerate(units)
        ]
        if rows:
            with self.engine.begin() as conn:
                conn.execute(insert(backfill_units_table), rows)

    def units(
        self, pipeline: str, backfill_id: str | None = None, statuses: Sequence[UnitStatus] | None = None
    ) -> list[BackfillUnit]:
        t = backfill_units_table
        query = select(t).where(t.c.pipeline == pipeline)
        if backfill_id is not None:
            query = query.where(t.c.backfill_id == backfill_id)
        if statuses is not None:
            query = query.where(t.c.status.in_(list(statuses)))
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(t.c.created_at, t.c.backfill_id, t.c.unit_id)).all()
        return [_unit(r) for r in rows]

    def stage(
        self, pipeline: str, unit: BackfillUnit, chunks: Sequence[StagedChunk], files: Sequence[str]
    ) -> None:
        """Record a read unit: its chunks' watermarks and the files holding their rows."""
        self._set(
            pipeline,
            [unit],
            "staged",
            chunks=json.dumps([c.to_dict() for c in chunks]),
            files=json.dumps(list(files)),
            rows=sum(c.rows for c in chunks),
            message=None,
        )

    def finish(
        self, pipeline: str, units: Sequence[BackfillUnit], status: UnitStatus, message: str | None = None
    ) -> None:
        """Mark staged units applied (or stale, saying why), in one transaction."""
        self._set(pipeline, units, status, message=message)

    def _set(self, pipeline: str, units: Sequence[BackfillUnit], status: UnitStatus, **values: Any) -> None:
        t = backfill_units_table
        now = dt.datetime.now(dt.UTC)
        with self.engine.begin() as conn:
            for unit in units:
                conn.execute(
                    update(t)
                    .where(
                        t.c.pipeline == pipeline,
                        t.c.backfill_id == unit.backfill_id,
                        t.c.unit_id == unit.unit_id,
                    )
                    .values(status=status, updated_at=now, **values)
                )


def _unit(row: Any) -> BackfillUnit:
    updated = row.updated_at if row.updated_at.tzinfo else row.updated_at.replace(tzinfo=dt.UTC)
    return BackfillUnit(
        row.backfill_id,
        row.unit_id,
        TableId.parse(row.table_name),
        row.key_column,
        tuple(StagedChunk.from_dict(c) for c in json.loads(row.chunks)),
        row.status,
        tuple(json.loads(row.files)) if row.files else (),
        int(row.rows or 0),
        row.message,
        updated,
    )
