"""``binlake plan``: validate the source, discover the tables, create their Iceberg tables, split
them into chunks, store the plan.

A table that already has a plan keeps it (a rerun resumes rather than re-splitting, so finished
chunks stay finished), unless ``replan`` is asked for. Every table is split before anything is
stored, and the plan is stored in one transaction: a failure leaves the state store as it was.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import CreateTable, TableId
from binlake.sink.creation import create_sink_tables
from binlake.source.chunks.splitter import ChunkSplitter, SplitPlan
from binlake.source.server.checks import Check
from binlake.source.server.connection import connect
from binlake.source.server.discovery import captured_tables, discover
from binlake.source.server.validator import has_errors, validate
from binlake.state.store import StateStore, StoredPlan

log = logging.getLogger(__name__)


class ValidationFailedError(BinlakeError):
    """The source failed validation; the failed checks are attached."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks
        failed = [c for c in checks if c.status == "error"]
        lines = "\n".join(f"  - {c.name}: {c.message}" + (f" Fix: {c.fix}" if c.fix else "") for c in failed)
        super().__init__(f"the source failed {len(failed)} check(s); nothing was planned:\n{lines}")


def discover_tables(config: PipelineConfig, only: list[TableId] | None = None) -> list[CreateTable]:
    """The schemas of the tables the pipeline captures (or of ``only`` those), as they are now."""
    with contextlib.closing(connect(config.source)) as conn:
        return discover(conn, only if only is not None else captured_tables(conn, config.source))


def plan(
    config: PipelineConfig,
    replan: bool = False,
    progress: Callable[[TableId, int], None] | None = None,
) -> list[StoredPlan]:
    """Plan every captured table that has no plan yet (all of them with ``replan``).

    Returns:
        The stored plans of all captured tables.

    Raises:
        ValidationFailedError: the source fails a check.
        ChunkKeyError: a table cannot be split.
    """
    checks = validate(config)
    if has_errors(checks):
        raise ValidationFailedError(checks)
    with StateStore(config.pipeline.resolved_state_uri) as store:
        name = config.pipeline.name
        schemas = discover_tables(config)
        planned = {p.table for p in store.plans(name).load()}
        todo = [s for s in schemas if replan or s.table not in planned]
        plans: list[SplitPlan] = []
        if todo:
            with contextlib.closing(connect(config.source)) as conn:
                splitter = ChunkSplitter.of(conn, config.source, progress=progress)
                for schema in todo:
                    plans.append(
                        splitter.split(schema, config.source.chunk_key_columns.get(schema.table.name))
                    )
        create_sink_tables(config, schemas)
        if plans:
            store.plans(name).save(plans)
        log.info("planned %d tables (%d kept their earlier plan)", len(plans), len(schemas) - len(plans))
        return store.plans(name).load([s.table for s in schemas])
