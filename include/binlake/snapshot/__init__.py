"""The snapshot step: read every planned chunk into Iceberg without locks, then switch to the stream.

``chunks`` (which chunks to read, in which groups; chunks an earlier run committed), ``rereads``
(tables to read again from the start: a schema change, a statement among their chunk reads, a
table gone or new), ``spans`` (where the snapshot read each table, in binlog positions),
``switch`` (the stream's start) and ``progress`` (the run's report). Spark runs the reads:
``spark/snapshot_job.py``.
"""

from __future__ import annotations

from binlake.errors import BinlakeError


class SnapshotError(BinlakeError):
    """The snapshot could not run."""
