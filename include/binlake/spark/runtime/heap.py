"""The driver's heap while a stream runs: what was alive at its start leaves the collector's scans.

Python's full (generation-2) collection walks every object it tracks, and most of a stream
driver's objects are there from its start and stay: the modules of pyspark, pyiceberg, pyarrow,
pandas, sqlalchemy and pydantic, the catalog, the writers. Probed over ``bench/merge.py``'s 100
batches (2 cores), full collections took 57-133 ms, every 20-60 s, each in the batch (or upkeep)
it landed in; with the 138k objects alive before the first batch frozen, 10-15 ms.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze what is alive now (after collecting what is not) until the block ends.

    Frozen objects are never collected while frozen, so the freeze ends with the block: a process
    that runs streams one after another (tests, Airflow's ``dags test``) gets back what the last
    one left behind.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
