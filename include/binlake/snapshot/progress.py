"""What a snapshot run did, per table, and its progress for people."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from binlake.offsets import BinlogOffset
from binlake.state.store import StoredPlan


@dataclass
class TableProgress:
    chunks: int
    finished: int
    rows: int = 0


@dataclass
class SnapshotReport:
    """What a snapshot run did; ``as_dict`` is the job's JSON summary line (pushed to XCom)."""

    pipeline: str
    chunks_read: int = 0
    chunks_recovered: int = 0
    rows: int = 0
    seconds: float = 0.0
    tables: dict[str, TableProgress] = field(default_factory=dict)
    high_watermarks: dict[str, dict[str, Any]] = field(default_factory=dict)
    switch_offset: BinlogOffset | None = None
    max_executor_rss_kb: int = 0

    @property
    def complete(self) -> bool:
        return all(t.finished == t.chunks for t in self.tables.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "complete": self.complete,
            "chunks_read": self.chunks_read,
            "chunks_recovered": self.chunks_recovered,
            "rows": self.rows,
            "seconds": round(self.seconds, 2),
            "rows_per_s": round(self.rows / self.seconds) if self.seconds else 0,
            "tables": {k: v.__dict__ for k, v in self.tables.items()},
            "high_watermarks": self.high_watermarks,
            "switch_offset": self.switch_offset.to_dict() if self.switch_offset else None,
            "max_executor_rss_kb": self.max_executor_rss_kb,
        }


Progress = Callable[[SnapshotReport, float], None]


def snapshot_figures(report: SnapshotReport) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Each table's rows and its chunks by state (``job_metrics``)."""
    return (
        {t: p.rows for t, p in report.tables.items()},
        {t: {"planned": p.chunks, "done": p.finished} for t, p in report.tables.items()},
    )


def track(report: SnapshotReport, plans: list[StoredPlan]) -> None:
    for plan in plans:
        report.tables[plan.table.name] = TableProgress(
            len(plan.chunks), plan.finished, sum(c.row_count or 0 for c in plan.chunks)
        )


def print_progress(report: SnapshotReport, seconds: float) -> None:
    """Progress for people: a bar on a terminal, plain lines in a log."""
    done = sum(t.finished for t in report.tables.values())
    total = sum(t.chunks for t in report.tables.values())
    rate = report.rows / seconds if seconds else 0.0
    remaining = (total - done) * (seconds / report.chunks_read) if report.chunks_read else 0.0
    line = (
        f"snapshot {done}/{total} chunks, {report.rows:,} rows, {rate:,.0f} rows/s, "
        f"{seconds:.1f} s elapsed, ~{remaining:.0f} s left"
    )
    if sys.stderr.isatty():
        width = 30
        filled = int(width * done / total) if total else width
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {line}", end="", file=sys.stderr, flush=True)
        if done == total:
            print(file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)
        for table, progress in sorted(report.tables.items()):
            print(f"  {table}: {progress.finished}/{progress.chunks} chunks", file=sys.stderr, flush=True)
