"""A micro-batch DataFrame as ``stream.batch_frame.BatchFrame``: cached on the executors while the
applier reads its head, the driver's tables, and the committables of the tables merged there."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import functions

from binlake.stream.bucket_merge import COMMITTABLE_DDL, SPLIT_DDL, BucketPlan, merge_buckets, split_blocks
from binlake.stream.records import CHANGES


class SparkBatchFrame:
    """``frame``: the micro-batch of ``foreachBatch``; ``buckets``: Spark tasks that merge."""

    def __init__(self, frame: Any, buckets: int) -> None:
        self._frame = frame.persist()  # read (decoded) once, whatever the applier asks of it
        self.buckets = buckets

    def head(self) -> pa.Table:
        changes = functions.col("kind") == functions.lit(CHANGES)
        data = functions.when(changes, functions.lit(None).cast("binary")).otherwise(functions.col("data"))
        return _arrow(self._frame.withColumn("data", data))

    def changes(self, tables: Sequence[str]) -> pa.Table:
        return _arrow(self._blocks(tables))

    def merge(self, plans: dict[str, BucketPlan]) -> pa.Table:
        split = self._blocks(list(plans)).mapInArrow(
            functools.partial(_split, plans=plans, buckets=self.buckets), SPLIT_DDL
        )
        merged = split.repartition(self.buckets, "table", "bucket").mapInArrow(
            functools.partial(_merge, plans=plans), COMMITTABLE_DDL
        )
        return _arrow(merged)

    def close(self) -> None:
        self._frame.unpersist()

    def _blocks(self, tables: Sequence[str]) -> Any:
        return self._frame.filter(
            (functions.col("kind") == functions.lit(CHANGES)) & functions.col("table").isin(list(tables))
        )


def _split(
    batches: Iterator[pa.RecordBatch], plans: dict[str, BucketPlan], buckets: int
) -> Iterator[pa.RecordBatch]:
    return split_blocks(batches, plans, buckets)


def _merge(batches: Iterator[pa.RecordBatch], plans: dict[str, BucketPlan]) -> Iterator[pa.RecordBatch]:
    return merge_buckets(batches, plans)


def _arrow(frame: Any) -> pa.Table:
    table: pa.Table = frame.toArrow()
    return table
