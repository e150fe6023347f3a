"""What each micro-batch of a pipeline's stream applied (the newest ``STREAM_HISTORY`` kept)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

from sqlalchemy import delete, select
from sqlalchemy.engine import Engine

from binlake.offsets import BinlogOffset
from binlake.state.tables import (
    aware,
    offset_from_text,
    offset_text,
    offsets_table,
    replace_row,
    stream_batches_table,
)

#: Batches kept per pipeline in ``binlake_stream_batches`` (older ones are pruned).
STREAM_HISTORY = 10_000


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
    phases: dict[str, float] = field(default_factory=dict, compare=False)
    """Seconds per phase of the batch (``stream.batch_clock``); not stored."""
    conflicts: int = field(default=0, compare=False)
    """Commit conflicts the batch's sink tables met (each refreshed and tried again); not stored."""
    read_ahead: bool = field(default=False, compare=False)
    """Whether the batch's rows were read while the batch before was applied; not stored."""


class StreamHistory:
    """The stream batches of one pipeline (``StateStore.stream_history``)."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def record(self, batch: StreamBatch, offset_name: str) -> None:
        """Record a finished micro-batch and move the stream's named offset to its end, together."""
        with self.engine.begin() as conn:
            replace_row(
                conn,
                stream_batches_table,
                {"pipeline": self.pipeline, "run_id": batch.run_id, "batch_id": batch.batch_id},
                {
                    "end_offset": offset_text(batch.end_offset),
                    "changes": json.dumps(batch.changes, sort_keys=True),
                    "rows": batch.rows,
                    "seconds": batch.seconds,
                    "lag_s": batch.lag_s,
                    "finished_at": batch.finished_at,
                },
            )
            replace_row(
                conn,
                offsets_table,
                {"pipeline": self.pipeline, "name": offset_name},
                {"offset": offset_text(batch.end_offset), "updated_at": batch.finished_at},
            )
            kept = (
                select(stream_batches_table.c.finished_at)
                .where(stream_batches_table.c.pipeline == self.pipeline)
                .order_by(stream_batches_table.c.finished_at.desc())
                .offset(STREAM_HISTORY)
                .limit(1)
            )
            oldest_kept = conn.execute(kept).scalar()
            if oldest_kept is not None:
                conn.execute(
                    delete(stream_batches_table).where(
                        stream_batches_table.c.pipeline == self.pipeline,
                        stream_batches_table.c.finished_at <= oldest_kept,
                    )
                )

    def batches(self, limit: int = 100, since: dt.datetime | None = None) -> list[StreamBatch]:
        """The newest recorded micro-batches (those finished after ``since``), newest first."""
        table = stream_batches_table
        after = [table.c.finished_at > since] if since is not None else []
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(stream_batches_table)
                .where(stream_batches_table.c.pipeline == self.pipeline, *after)
                .order_by(stream_batches_table.c.finished_at.desc(), stream_batches_table.c.batch_id.desc())
                .limit(limit)
            ).all()
        batches = []
        for row in rows:
            end = offset_from_text(row.end_offset)
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
                    aware(row.finished_at),
                )
            )
        return batches
