"""The ``binlake_snapshot`` PySpark data source: one partition per group of chunks.

Each task reads its chunks with the lock-free chunk reader and writes their rows as Parquet files
into the Iceberg table's data folder, rolling to the target file size (not one small file per
chunk). It yields one small row per chunk — its watermarks, row count and the task's files — so the
table's data never travels through the JVM; the driver commits each task's files together with its
chunks' ids and high watermarks in one Iceberg commit (``spark/snapshot_job.py``).

Options (all strings): ``source`` (the source section as JSON, without the password),
``password`` (kept separate: Spark redacts options whose name contains "password"), ``tables``
(table schemas by name, JSON), ``locations`` (Iceberg data folder by table, JSON), ``groups``
(chunk groups, JSON), ``target_file_size`` (bytes), ``server_ids`` (``start-end``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

SUMMARY_SCHEMA = (
    "task STRING, chunk_id STRING, table STRING, low STRING, high STRING, rows BIGINT, files STRING, "
    "seconds DOUBLE, max_rss_kb BIGINT"
)


class ChunkGroup(InputPartition):
    """The chunks one Spark task reads: ``[{"table": "db.t", "id": 3, "key": "id", "start": …}]``."""

    def __init__(self, index: int, chunks: list[dict[str, Any]]) -> None:
        super().__init__(index)
        self.index = index
        self.chunks = chunks


class SnapshotDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "binlake_snapshot"

    def schema(self) -> str:
        return SUMMARY_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return SnapshotReader(dict(self.options))


class SnapshotReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        groups = json.loads(self.options["groups"])
        return [ChunkGroup(i, group) for i, group in enumerate(groups)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # Imported here: this runs in a Spark Python worker, possibly on another machine.
        import pyarrow as pa

        from binlake.spark.snapshot_task import run_task

        assert isinstance(partition, ChunkGroup)
        rows = run_task(self.options, partition.index, partition.chunks)
        yield pa.RecordBatch.from_pylist(rows, schema=_summary_arrow_schema())


def _summary_arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("task", pa.string()),
            ("chunk_id", pa.string()),
            ("table", pa.string()),
            ("low", pa.string()),
            ("high", pa.string()),
            ("rows", pa.int64()),
            ("files", pa.string()),
            ("seconds", pa.float64()),
            ("max_rss_kb", pa.int64()),
        ]
    )
