"""The driver's heap while a job runs: what was alive at its start leaves the collector's scans.

Python's full (generation-2) collection walks every object it tracks, and most of a stream
driver's objects are there from its start and stay: the modules of pyspark, pyiceberg, pyarrow,
pandas, sqlalchemy and pydantic, the catalog, the writers. Probed over ``bench/merge.py``'s 100
batches (2 cores), full collections took 57-133 ms, every 20-60 s, each in the batch (or upkeep)
it landed in; with the 138k objects alive before the first batch frozen, 10-15 ms. A snapshot's
driver, 190k objects at its start, met one in its second 1M-row run on a session: 0.105 s of 1.6 s.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap(collect: bool = True) -> Iterator[None]:
    """Freeze what is alive now (after collecting what is not, if ``collect``) until the block ends.

    Frozen objects are never collected while frozen, so the freeze ends with the block: a process
    that runs jobs one after another (tests, Airflow's ``dags test``) gets back what the last one
    left behind. Without ``collect``, garbage alive now waits for the block's end: a job that
    should start at once (a snapshot: the collection is 0.11 s) keeps it that long instead.
    """
    if collect:
        gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
