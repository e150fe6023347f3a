"""The ``binlake_binlog`` PySpark streaming data source: the source's binlog as micro-batches.

Offsets are binlog file and position (``{"file": "binlog.000003", "pos": 1234}``), always at a
transaction boundary. The driver-side reader only looks at positions (SHOW MASTER STATUS, SHOW
BINARY LOGS, and a header-only scan to find transaction boundaries); executors decode segments in
parallel (``spark/stream_task.py``) and return rows of ``stream.records``.

Options (all strings): ``source`` (JSON, without the password), ``password`` (separate: Spark
redacts options named like it), ``tables`` (schemas by name, JSON), ``chunk_keys`` (JSON),
``start`` (offset JSON), ``server_ids`` (``start-end``), ``max_bytes``, ``segment_bytes``,
``parallelism``, ``state_uri`` and ``pipeline`` (for heartbeats).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)
from typing_extensions import override

from binlake.stream.records import SPARK_SCHEMA


class Segment(InputPartition):
    """A range (start, end] of the binlog that one task decodes; both ends are boundaries."""

    def __init__(self, index: int, start: dict[str, Any], end: dict[str, Any]) -> None:
        super().__init__(index)
        self.index = index
        self.start = start
        self.end = end


class BinlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "binlake_binlog"

    def schema(self) -> str:
        return SPARK_SCHEMA

    @override
    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return BinlogStreamReader(dict(self.options))


class BinlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches over the binlog. Holds no connection: Spark pickles it to executors."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.target: dict[str, Any] | None = None

    @override
    def initialOffset(self) -> dict[str, Any]:
        return dict(json.loads(self.options["start"]))

    @override
    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxBytes(int(self.options["max_bytes"]))

    @override
    def prepareForTriggerAvailableNow(self) -> None:
        # --until-caught-up: stop at the position the source has now.
        self.target = _offset_dict(_positions(self.options).head())

    @override
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        positions = _positions(self.options)
        head = positions.head()
        positions.heartbeat(head)
        end = _offset(self.target) if self.target is not None else head
        end = min(end, head)
        begin = _offset(start)
        if end <= begin:
            return start
        if isinstance(limit, ReadAllAvailable) or not isinstance(limit, ReadMaxBytes):
            return _offset_dict(end)
        admitted = positions.admit(begin, end, limit.max_bytes)
        return _offset_dict(admitted if admitted is not None and admitted < end else end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = _offset(start), _offset(end)
        if finish <= begin:
            return []
        positions = _positions(self.options)
        total = positions.distance(begin, finish)
        slots = int(self.options["parallelism"]) * 2
        parts = max(1, min(slots, math.ceil(total / int(self.options["segment_bytes"]))))
        ranges = positions.cut(begin, finish, parts) if parts > 1 else [(begin, finish)]
        return [Segment(i, _offset_dict(a), _offset_dict(b)) for i, (a, b) in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # Imported here: this runs in a Spark Python worker, possibly on another machine.
        from binlake.spark.stream_task import read_segment

        assert isinstance(partition, Segment)
        yield from read_segment(self.options, partition.index, partition.start, partition.end)

    def commit(self, end: dict[str, Any]) -> None:
        # Nothing to do: the sink records how far each table got, in the same Iceberg commit as
        # its data, and the state store records each finished batch (``stream/apply.py``).
        return None


def _positions(options: dict[str, str]) -> Any:
    from binlake.stream.positions import SourcePositions

    return SourcePositions.from_options(options)


def _offset(data: dict[str, Any]) -> Any:
    from binlake.offsets import BinlogOffset

    return BinlogOffset(str(data["file"]), int(data["pos"]))


def _offset_dict(offset: Any) -> dict[str, Any]:
    # No GTID here: Spark compares offsets as JSON, and the same position must look the same.
    return {"file": offset.file, "pos": offset.pos}
