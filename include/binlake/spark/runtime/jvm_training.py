"""The workload a Spark driver JVM runs while it records the classes for ``jvm_archive``: what
binlake's jobs use (SQL, Arrow both ways, a Python data source, a streaming query)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from typing_extensions import override

from binlake.spark.runtime.jvm_archive import DRIVER_OPTIONS


class _Reader(DataSourceReader):
    @override
    def read(self, partition: Any) -> Iterator[tuple[int]]:
        yield from ((n,) for n in range(100))


class _StreamReader(DataSourceStreamReader):
    @override
    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    @override
    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        return {"n": 2}

    @override
    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(n) for n in range(start["n"], end["n"])]

    @override
    def read(self, partition: Any) -> Iterator[tuple[int]]:
        yield (partition.value,)


class TrainingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "binlake_jvm_training"

    @override
    def schema(self) -> str:
        return "n LONG"

    @override
    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader()

    @override
    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader()


def _rows(groups: Iterable[tuple[int, int]]) -> Iterator[dict[str, Any]]:
    for index, value in groups:
        yield {"group": index, "rows": value}


def train(options: str, work: str) -> None:
    """Start a session with ``options`` on its driver JVM, use it, and wait until the JVM has
    exited (and so written the archive)."""
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("binlake jvm archive")
        .config(DRIVER_OPTIONS, options)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.dataSource.register(TrainingSource)
    frame = spark.range(20_000).selectExpr("id % 7 AS k", "CAST(id AS STRING) AS v")
    frame.groupBy("k").count().toArrow()
    spark.createDataFrame(pa.table({"k": [1, 2], "v": ["a", "b"]}).to_pandas()).collect()
    # The snapshot's and the backfill's job: chunk groups as a plain RDD, summary rows collected.
    spark.sparkContext.parallelize(list(enumerate(range(4))), 2).mapPartitions(_rows).collect()
    source = spark.read.format(TrainingSource.name()).load()
    source.mapInArrow(lambda batches: batches, "n LONG").toArrow()
    query = (
        spark.readStream.format(TrainingSource.name())
        .load()
        .writeStream.foreachBatch(lambda batch, _id: batch.toArrow())
        .option("checkpointLocation", str(Path(work) / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    gateway: Any = spark.sparkContext._gateway
    jvm = gateway.proc  # the spark-submit process pyspark started: the JVM
    spark.stop()
    # The JVM writes the archive as it exits, which it does when its stdin closes; wait for that
    # here so the caller finds the whole file once this process is gone.
    jvm.stdin.close()
    jvm.wait(300)


if __name__ == "__main__":  # python -m binlake.spark.runtime.jvm_training OPTIONS WORKDIR (jvm_archive.build)
    train(sys.argv[1], sys.argv[2])
