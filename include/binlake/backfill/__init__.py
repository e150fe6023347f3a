"""The backfill step: read tables (or a key range) again while the stream runs, without locks.

``plan`` (check the pipeline can take it, split the tables again, record units in the ledger),
``progress`` (the run's report, unit counts) and ``wait`` (until the stream applied every unit).
Spark reads the units (``spark/backfill_job.py``); the stream applies them at their high
watermarks (``stream/backfill.py``); the ledger is ``state/backfills.py``.
"""

from __future__ import annotations

from binlake.errors import BinlakeError


class BackfillError(BinlakeError):
    """The backfill could not run (or the stream did not apply it)."""
