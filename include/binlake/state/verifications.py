"""What ``binlake verify`` found, chunk by chunk: kept for ``binlake status`` and the reports."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import delete, func, insert, select
from sqlalchemy.engine import Engine

from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import ChunkRange
from binlake.state.codec import decode_key, encode_key
from binlake.state.tables import verify_chunks_table

Status = Literal["equal", "drifted", "unverified", "repaired"]


@dataclass(frozen=True)
class ChunkVerdict:
    """One chunk compared: equal, drifted (the sink differs), unverified (``note`` says why) or
    repaired (drifted, backfilled, then found equal)."""

    table: str
    key_column: str
    index: int
    range: ChunkRange
    status: Status
    source_rows: int | None = None
    sink_rows: int | None = None
    at: BinlogOffset | None = None
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "chunk": self.index,
            "range": [self.range.start, self.range.end],
            "status": self.status,
            "source_rows": self.source_rows,
            "sink_rows": self.sink_rows,
            "at": str(self.at) if self.at else None,
            **({"note": self.note} if self.note else {}),
        }


class Verifications:
    """One pipeline's verification results."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def record(self, verify_id: str, verdicts: Sequence[ChunkVerdict]) -> None:
        """Keep ``verdicts`` (a chunk verified again replaces its earlier verdict)."""
        if not verdicts:
            return
        t = verify_chunks_table
        now = dt.datetime.now(dt.UTC)
        with self.engine.begin() as conn:
            for v in verdicts:
                conn.execute(
                    delete(t).where(
                        t.c.pipeline == self.pipeline, t.c.verify_id == verify_id,
                        t.c.table_name == v.table, t.c.chunk == v.index,
                    )
                )  # fmt: skip
            conn.execute(
                insert(t),
                [
                    {
                        "pipeline": self.pipeline, "verify_id": verify_id, "table_name": v.table,
                        "chunk": v.index, "key_column": v.key_column,
                        "chunk_range": _range_json(v.range),
                        "status": v.status, "source_rows": v.source_rows, "sink_rows": v.sink_rows,
                        "at": json.dumps(v.at.to_dict()) if v.at else None, "note": v.note or None,
                        "verified_at": now,
                    }
                    for v in verdicts
                ],
            )  # fmt: skip

    def latest(self) -> tuple[str, list[ChunkVerdict]] | None:
        """The last verification's id and verdicts (None: never verified)."""
        t = verify_chunks_table
        with self.engine.connect() as conn:
            last = conn.execute(
                select(t.c.verify_id).where(t.c.pipeline == self.pipeline)
                .group_by(t.c.verify_id).order_by(func.max(t.c.verified_at).desc()).limit(1)
            ).scalar()  # fmt: skip
        return None if last is None else (str(last), self.verdicts(str(last)))

    def verdicts(self, verify_id: str) -> list[ChunkVerdict]:
        """Every verdict of one verification, by table and chunk."""
        t = verify_chunks_table
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t).where(t.c.pipeline == self.pipeline, t.c.verify_id == verify_id)
                .order_by(t.c.table_name, t.c.chunk)
            ).all()  # fmt: skip
        return [_verdict(r) for r in rows]


def _range_json(chunk: ChunkRange) -> str:
    return json.dumps({"start": encode_key(chunk.start), "end": encode_key(chunk.end)})


def _verdict(row: object) -> ChunkVerdict:
    r = row._mapping  # type: ignore[attr-defined]
    chunk = json.loads(r["chunk_range"])
    at = json.loads(r["at"]) if r["at"] else None
    return ChunkVerdict(
        r["table_name"], r["key_column"], int(r["chunk"]),
        ChunkRange(decode_key(chunk["start"]), decode_key(chunk["end"])), r["status"],
        r["source_rows"], r["sink_rows"], BinlogOffset.from_dict(at) if at else None, r["note"] or "",
    )  # fmt: skip
