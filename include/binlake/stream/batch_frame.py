"""A micro-batch as the applier reads it: a little at a time, so most of it can stay on the executors.

``head`` brings the rows the driver always needs (segment ends, gaps, and each block's table and
count, without its data); ``changes`` the blocks of the tables the driver merges itself; ``merge``
runs ``stream.shares.bucket_merge`` for the others and brings back their committables. The Spark form
(``spark.spark_frames``) keeps the batch cached on the executors between the three; ``ArrowFrame``
holds a batch given as Arrow (tests, and callers without Spark) and runs the same steps in-process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from binlake.stream.records import CHANGES
from binlake.stream.shares.bucket_merge import BucketPlan, BucketResult, merge_locally


class BatchFrame(Protocol):
    read_ahead: bool
    """Whether the batch's rows were read while the driver applied the batch before."""

    def head(self) -> pa.Table:
        """The envelope's rows (``stream.records``) with the ``data`` of ``changes`` rows left out."""
        ...

    def changes(self, tables: Sequence[str]) -> pa.Table:
        """The ``changes`` rows of these tables, whole."""
        ...

    def merge(self, plans: dict[str, BucketPlan]) -> list[tuple[str, BucketResult]]:
        """The committables of the planned tables' changes, per table and bucket."""
        ...

    def close(self) -> None: ...


class ArrowFrame:
    """A batch held as one Arrow envelope."""

    read_ahead = False

    def __init__(self, envelope: pa.Table, buckets: int = 2) -> None:
        self.envelope = envelope
        self.buckets = buckets

    def head(self) -> pa.Table:
        changes = pc.equal(self.envelope.column("kind"), CHANGES).fill_null(False)
        data = pc.if_else(
            changes, pa.nulls(self.envelope.num_rows, pa.binary()), self.envelope.column("data")
        )
        return self.envelope.set_column(self.envelope.schema.get_field_index("data"), "data", data)

    def changes(self, tables: Sequence[str]) -> pa.Table:
        return self.envelope.filter(_blocks_of(self.envelope, tables))

    def merge(self, plans: dict[str, BucketPlan]) -> list[tuple[str, BucketResult]]:
        return merge_locally(self.changes(list(plans)), plans, self.buckets)

    def close(self) -> None:
        pass


def _blocks_of(envelope: pa.Table, tables: Sequence[str]) -> pa.Array:
    wanted = pc.is_in(envelope.column("table"), value_set=pa.array(list(tables), pa.string()))
    return pc.and_(pc.equal(envelope.column("kind"), CHANGES), wanted).fill_null(False)


def block_counts(head: pa.Table) -> dict[str, int]:
    """Changes per table in a batch (from its head)."""
    return _per_table(head, "rows", "sum")


def first_positions(head: pa.Table) -> dict[str, int]:
    """Per table, the position of its first change in a batch (from its head)."""
    return _per_table(head, "at", "min")


def _per_table(head: pa.Table, column: str, how: str) -> dict[str, int]:
    blocks = head.filter(pc.equal(head.column("kind"), CHANGES))
    grouped = blocks.group_by("table").aggregate([(column, how)])
    names, values = grouped.column("table").to_pylist(), grouped.column(f"{column}_{how}").to_pylist()
    return dict(zip(names, values, strict=True))
