"""A micro-batch DataFrame as ``stream.batch_frame.BatchFrame``: cached on the executors while the
applier reads its head, the driver's tables, and the committables of the tables merged there."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import functions

from binlake.stream.batch_frame import ArrowFrame
from binlake.stream.records import CHANGES
from binlake.stream.shares.bucket_merge import SPLIT_DDL, BucketPlan, BucketResult, merge_parts, split_blocks


class CollectedFrame(ArrowFrame):
    """The micro-batch collected whole at its head, in one Spark job: for pipelines none of whose
    tables merge on the executors (caching the batch and reading it in parts would cost a second
    job per batch for nothing)."""

    def __init__(self, frame: Any, then: Callable[[], None] | None = None) -> None:
        super().__init__(pa.table({}))
        self._frame = frame
        self._then = then
        """Called once the batch is in the driver (``spark.read_ahead`` starts on the next one)."""

    def head(self) -> pa.Table:
        self.envelope = self._collect()
        then, self._then = self._then, None
        if then is not None:
            then()
        return super().head()

    def _collect(self) -> pa.Table:
        return _arrow(self._frame)


class SparkBatchFrame:
    """``frame``: the micro-batch of ``foreachBatch``; ``buckets``: Spark tasks that merge."""

    read_ahead = False

    def __init__(self, frame: Any, buckets: int) -> None:
        self._frame = frame.persist()  # read (decoded) once, whatever the applier asks of it
        self.buckets = buckets

    def head(self) -> pa.Table:
        changes = functions.col("kind") == functions.lit(CHANGES)
        data = functions.when(changes, functions.lit(None).cast("binary")).otherwise(functions.col("data"))
        return _arrow(self._frame.withColumn("data", data))

    def changes(self, tables: Sequence[str]) -> pa.Table:
        return _arrow(self._blocks(tables))

    def merge(self, plans: dict[str, BucketPlan]) -> list[tuple[str, BucketResult]]:
        split = self._blocks(list(plans)).mapInArrow(
            functools.partial(_split, plans=plans, buckets=self.buckets), SPLIT_DDL
        )
        # Bucket b goes to task b (a hash partitioning of the few bucket numbers would put two
        # buckets in one task as often as not); the rows are blocks' shares, a few per segment.
        by_bucket = split.rdd.map(lambda row: (row["bucket"], (row["table"], row["bucket"], row["data"])))
        merged = by_bucket.partitionBy(self.buckets, _same).mapPartitions(
            functools.partial(_merge, plans=plans)
        )
        found: list[tuple[str, BucketResult]] = merged.collect()
        return found

    def close(self) -> None:
        self._frame.unpersist()

    def _blocks(self, tables: Sequence[str]) -> Any:
        kind, table = functions.col("kind"), functions.col("table")
        return self._frame.filter((kind == functions.lit(CHANGES)) & table.isin(list(tables)))


def _split(
    batches: Iterator[pa.RecordBatch], plans: dict[str, BucketPlan], buckets: int
) -> Iterator[pa.RecordBatch]:
    return split_blocks(batches, plans, buckets)


def _merge(
    pairs: Iterable[tuple[int, tuple[str, int, Any]]], plans: dict[str, BucketPlan]
) -> Iterator[tuple[str, BucketResult]]:
    return merge_parts((part for _, part in pairs), plans)


def _same(bucket: int) -> int:
    return bucket


def _arrow(frame: Any) -> pa.Table:
    table: pa.Table = frame.toArrow()
    return table
