"""Waiting until the stream has applied a backfill's units."""

from __future__ import annotations

import time
from collections.abc import Callable

from binlake.backfill import BackfillError
from binlake.backfill.progress import unit_counts
from binlake.config import PipelineConfig
from binlake.state.backfills import BackfillLedger, BackfillUnit
from binlake.state.store import StateStore


def wait_applied(
    config: PipelineConfig,
    backfill_id: str,
    timeout_s: float | None = None,
    poll_s: float = 2.0,
    progress: Callable[[dict[str, int]], None] | None = None,
) -> list[BackfillUnit]:
    """Wait until the stream has applied every unit of ``backfill_id``.

    Raises:
        BackfillError: the backfill does not exist, a unit went stale, or the wait timed out.
    """
    name = config.pipeline.name
    deadline = time.monotonic() + (timeout_s if timeout_s is not None else config.backfill.wait_timeout_s)
    with StateStore(config.pipeline.resolved_state_uri) as store:
        ledger = BackfillLedger(store)
        last: dict[str, int] = {}
        while True:
            units = ledger.units(name, backfill_id)
            if not units:
                raise BackfillError(f"Pipeline `{name}` has no backfill `{backfill_id}`.")
            counts = unit_counts(units)
            if counts != last and progress is not None:
                progress(counts)
            last = counts
            stale = [u for u in units if u.status == "stale"]
            if stale:
                raise BackfillError(
                    f"Backfill `{backfill_id}`: {len(stale)} units went stale before the stream applied "
                    f"them ({stale[0].name}: {stale[0].message}). Fix: run the backfill again with the same "
                    "id; it reads them again."
                )
            if counts.get("applied", 0) == len(units):
                return units
            if time.monotonic() > deadline:
                raise BackfillError(
                    f"Backfill `{backfill_id}`: the stream applied {counts.get('applied', 0)} of "
                    f"{len(units)} units in time ({counts}). Is the stream running? Staged units wait "
                    "for it: run `binlake stream`, then wait again."
                )
            time.sleep(poll_s)
