"""Each sink table's data-quality check in each run."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine

from binlake.state.tables import aware, quality_results_table, replace_row


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


class QualityResults:
    """The quality results of one pipeline (``StateStore.quality``)."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def record(self, result: QualityResult) -> None:
        """Keep one table's check of one run (a rerun of the run replaces it)."""
        with self.engine.begin() as conn:
            replace_row(
                conn,
                quality_results_table,
                {"pipeline": self.pipeline, "run_name": result.run_name, "table_name": result.table},
                {
                    "success": result.success,
                    "results": json.dumps(result.results, default=str),
                    "report": result.report,
                    "checked_at": result.checked_at,
                },
            )

    def results(self, run_name: str | None = None) -> list[QualityResult]:
        """The checks of one run (or of every run), newest first."""
        query = select(quality_results_table).where(quality_results_table.c.pipeline == self.pipeline)
        if run_name is not None:
            query = query.where(quality_results_table.c.run_name == run_name)
        query = query.order_by(quality_results_table.c.checked_at.desc(), quality_results_table.c.table_name)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            QualityResult(
                r.run_name, r.table_name, bool(r.success), json.loads(r.results), r.report,
                aware(r.checked_at),
            )
            for r in rows
        ]  # fmt: skip
