"""The ``binlake_binlog`` PySpark streaming data source: the source's binlog as micro-batches.

Offsets are binlog file and position (``{"file": "binlog.000003", "pos": 1234}``), always at a
transaction boundary. The driver-side reader only looks at positions (SHOW MASTER STATUS, SHOW
BINARY LOGS, and a header-only scan to find transaction boundaries); executors decode segments in
parallel (``spark/stream_task.py``) and return rows of ``stream.records``.

Options (all strings): ``config`` (the pipeline's config as JSON, without the password),
``password`` (separate: Spark redacts options named like it; see ``stream.positions.config_options``)
and ``start`` (offset JSON). The tables' schemas come from the schema history, per segment.
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


class Segment(InputPartition):
    """A range (start, end] of the binlog that one task decodes; both ends are boundaries.

    ``tables``: the captured tables' schemas in force in the range (JSON). A micro-batch never
    crosses a schema change of a captured table except at its very start, so the schemas in force
    at its end hold for all of its rows — except rows the snapshot holds, which may be older:
    ``held`` (JSON) gives per table the position up to which the reader skips them undecoded.
    """

    def __init__(
        self,
        index: int,
        start: dict[str, Any],
        end: dict[str, Any],
        tables: str,
        prepares: str = "[]",
        held: str = "{}",
    ) -> None:
        super().__init__(index)
        self.index = index
        self.start = start
        self.end = end
        self.tables = tables
        self.held = held
        self.prepares = prepares
        """XA prepares the planning side saw for commits in the batch (JSON): the segment reader
        need not look for them."""


class BinlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "binlake_binlog"

    def schema(self) -> str:
        # Imported here, like everything binlake in this module: Spark's streaming source runner
        # imports the module to plan batches and needs none of the decoding side (pyarrow …), and
        # a process of Spark's asks only for the schema at each query start.
        from binlake.stream.envelope import SPARK_SCHEMA

        return SPARK_SCHEMA

    @override
    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return BinlogStreamReader(dict(self.options))


class BinlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches over the binlog. Holds no connection: Spark pickles it to executors."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.target: dict[str, Any] | None = None
        self._config: Any = None
        self._first_highs: dict[str, dict[str, Any]] | None = None

    @property
    def config(self) -> Any:
        """The pipeline's config (read from the options once per process)."""
        if self._config is None:
            from binlake.stream.positions import config_from_options

            self._config = config_from_options(self.options)
        return self._config

    @property
    def first_highs(self) -> dict[str, dict[str, Any]]:
        """Per snapshotted table, the offset up to which the snapshot holds its rows (read from the
        state store once per process: the plans do not change under a running stream)."""
        if self._first_highs is None:
            self._first_highs = first_highs(self.config)
        return self._first_highs

    @override
    def initialOffset(self) -> dict[str, Any]:
        return dict(json.loads(self.options["start"]))

    @override
    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxBytes(self.config.stream.max_bytes_per_batch)

    @override
    def prepareForTriggerAvailableNow(self) -> None:
        # --until-caught-up: stop at the position the source has now.
        self.target = _offset_dict(_positions(self.config).head())

    @override
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        positions = _positions(self.config)
        head = positions.head()
        positions.heartbeat(head)
        end = _offset(self.target) if self.target is not None else head
        end = min(end, head)
        begin = _offset(start)
        if end <= begin:
            return start
        if isinstance(limit, ReadAllAvailable) or not isinstance(limit, ReadMaxBytes):
            return _offset_dict(_schema_cut(self.config, positions, begin, end))
        admitted = positions.admit(begin, end, limit.max_bytes)
        return _offset_dict(_schema_cut(self.config, positions, begin, admitted or end))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = _offset(start), _offset(end)
        if finish <= begin:
            return []
        positions = _positions(self.config)
        planned = plan_segments(self.config, positions, begin, finish, self.first_highs)
        budget = self.config.stream.max_bytes_per_batch
        if positions.distance(begin, finish) >= budget:
            # The budget ended the batch, a backlog follows: the next batch's range is scanned
            # while this one runs (Spark plans the next batch only once this one is done).
            target = _offset(self.target) if self.target is not None else None
            positions.admit_ahead(finish, target, budget)
        return planned

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # Imported here: this runs in a Spark Python worker, possibly on another machine.
        from binlake.spark.stream_task import read_segment

        assert isinstance(partition, Segment)
        yield from read_segment(
            self.config,
            partition.index,
            partition.start,
            partition.end,
            partition.tables,
            partition.prepares,
            partition.held,
        )

    def commit(self, end: dict[str, Any]) -> None:
        # Nothing to do: the sink records how far each table got, in the same Iceberg commit as
        # its data, and the state store records each finished batch (``stream/apply.py``).
        return None


def plan_segments(
    config: Any, positions: Any, begin: Any, finish: Any, first_highs: dict[str, dict[str, Any]]
) -> list[Segment]:
    """The segments of the micro-batch (begin, finish]: the source's partitions, and what the
    driver's read-ahead (``spark.read_ahead``) reads for a batch it foresees — the same cut, so
    the same rows."""
    total = positions.distance(begin, finish)
    slots = config.pipeline.parallelism * 2
    parts = max(1, min(slots, math.ceil(total / config.stream.segment_bytes)))
    ranges = positions.cut(begin, finish, parts) if parts > 1 else [(begin, finish)]
    tables = _tables_at(config, finish)
    captured = json.loads(tables)
    held = json.dumps({t: o for t, o in first_highs.items() if t in captured and _offset(o) > begin})
    prepares = json.dumps([_prepare_dict(p) for p in positions.xa_prepares(begin, finish)])
    return [
        Segment(i, _offset_dict(a), _offset_dict(b), tables, prepares, held)
        for i, (a, b) in enumerate(ranges)
    ]


def first_highs(config: Any) -> dict[str, dict[str, Any]]:
    """Per snapshotted table, the offset up to which the snapshot holds its rows."""
    from binlake.snapshot.spans import stream_spans
    from binlake.state.store import StateStore

    with StateStore(config.pipeline.resolved_state_uri) as store:
        spans = stream_spans(config, store)
    return {t.name: s.first_high.to_dict() for t, s in spans.items()}


def _positions(config: Any) -> Any:
    from binlake.stream.positions import SourcePositions

    return SourcePositions.from_config(config)


def _schema_cut(config: Any, positions: Any, begin: Any, end: Any) -> Any:
    """Where the batch from ``begin`` must end so that no schema change of a captured table lies
    inside it: before the first such statement (flush), unless that statement comes first — then
    the protocol applies it here and the batch runs on to the next one."""
    from binlake.errors import BinlakeError
    from binlake.state.store import StateStore
    from binlake.stream.schema_changes import SchemaChangeProtocol

    with StateStore(config.pipeline.resolved_state_uri) as store:
        protocol = SchemaChangeProtocol(config, store)
        for before, boundary in positions.statements(begin, end):
            try:
                ddl = protocol.tracker.ddl(before, boundary)
            except BinlakeError:
                if before > begin:
                    return before  # commit what came before the statement, then fail at it
                raise
            if ddl is None:
                continue
            if before > begin:
                return before
            protocol.handle(ddl)
            begin = ddl.offset
        return end


def _tables_at(config: Any, offset: Any) -> str:
    from binlake.events import table_to_dict
    from binlake.state.store import StateStore
    from binlake.stream.schema_tracker import SchemaTracker

    with StateStore(config.pipeline.resolved_state_uri) as store:
        schemas = SchemaTracker(config, store).schemas_at(offset)
    return json.dumps({t.name: table_to_dict(s) for t, s in schemas.items()})


def _offset(data: dict[str, Any]) -> Any:
    from binlake.offsets import BinlogOffset

    return BinlogOffset(str(data["file"]), int(data["pos"]))


def _prepare_dict(prepared: Any) -> dict[str, Any]:
    start, end = _offset_dict(prepared.start), _offset_dict(prepared.end)
    return {"xid": str(prepared.xid), "start": start, "end": end}


def _offset_dict(offset: Any) -> dict[str, Any]:
    # No GTID here: Spark compares offsets as JSON, and the same position must look the same.
    return {"file": offset.file, "pos": offset.pos}
