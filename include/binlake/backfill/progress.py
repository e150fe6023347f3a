"""What a backfill run did, for people and for the job's JSON line."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from binlake.state.backfills import BackfillUnit


@dataclass
class BackfillReport:
    """What a backfill run did; ``as_dict`` is the job's JSON summary line (pushed to XCom)."""

    pipeline: str
    backfill_id: str
    units: int = 0
    staged: int = 0
    chunks_read: int = 0
    rows: int = 0
    seconds: float = 0.0
    tables: dict[str, int] = field(default_factory=dict)
    """Rows staged per table in this run."""
    table_chunks: dict[str, int] = field(default_factory=dict)
    """Chunks read per table in this run."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "backfill_id": self.backfill_id,
            "units": self.units,
            "staged": self.staged,
            "chunks_read": self.chunks_read,
            "rows": self.rows,
            "seconds": round(self.seconds, 2),
            "rows_per_s": round(self.rows / self.seconds) if self.seconds else 0,
            "tables": self.tables,
        }


Progress = Callable[[BackfillReport], None]


def backfill_figures(report: BackfillReport) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Each table's rows staged and its chunks read (``job_metrics``)."""
    return dict(report.tables), {t: {"read": n} for t, n in report.table_chunks.items()}


def unit_counts(units: Sequence[BackfillUnit]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for unit in units:
        counts[unit.status] = counts.get(unit.status, 0) + 1
    return counts


def print_progress(report: BackfillReport) -> None:
    rate = report.rows / report.seconds if report.seconds else 0.0
    print(
        f"backfill {report.backfill_id}: {report.chunks_read} chunks staged, {report.rows:,} rows, "
        f"{rate:,.0f} rows/s, {report.seconds:.1f} s",
        file=sys.stderr,
        flush=True,
    )
