"""A batch merged on the executors (in key buckets) commits what the driver's merge commits: the
same rows, through the key index, exactly once; updates lacking columns fall back to the driver."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.sink.writer import IcebergWriter
from binlake.source.binlog.event_rows import EventRows
from binlake.source.binlog.row_decoder import ABSENT
from binlake.state.store import StateStore
from binlake.stream.applier_parts import SinkTables
from binlake.stream.apply import BatchApplier
from binlake.stream.batch_frame import ArrowFrame
from binlake.stream.records import ENVELOPE_SCHEMA, RecordBuilder, images, table_changes
from binlake.stream.shares.bucket_merge import key_buckets
from binlake.stream.shares.table_sink import TableSink
from tests.sink.helpers import content, create, make_catalog

T = TableId("db", "t")
SCHEMA = CreateTable(
    T,
    (Column("id", "bigint", "bigint(20)", False), Column("v", "varchar", "varchar(20)", collation="x")),
    ("id",),
)
MOR = {"write.merge.mode": "merge-on-read"}


class Binlog:
    """Row events at increasing positions, cut into envelopes (one per batch, two segments each)."""

    def __init__(self) -> None:
        self.pos = 1000

    def batch(self, *events: tuple[str, list[tuple[object, ...]]]) -> pa.Table:
        parts = []
        half = len(events) // 2
        for segment in (events[:half], events[half:]):
            builder = RecordBuilder([SCHEMA], {})
            for op, images_ in segment:
                self.pos += 100
                builder.add(EventRows(T, op, images_, BinlogOffset("binlog.000001", self.pos), 1))
            self.pos += 100
            builder.segment(BinlogOffset("binlog.000001", self.pos), 1)
            parts.append(builder.batch())
        return pa.Table.from_batches(parts[::-1], schema=ENVELOPE_SCHEMA)  # segments in any order


def applier(tmp_path: Path, name: str, merge_from: int | None) -> tuple[BatchApplier, IcebergWriter]:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, name, properties=MOR), key_index_dir=tmp_path / "keys")
    store = StateStore(f"sqlite:///{tmp_path / f'{name}-state.db'}")
    sinks = {T.name: TableSink(SCHEMA, writer, {})}
    return BatchApplier("p", "run", store, SinkTables(sinks), merge_from=merge_from), writer


def data_files(writer: IcebergWriter) -> int:
    writer.table.refresh()
    return sum(1 for task in writer.table.scan().plan_files() for _ in [task.file])


WORKLOAD = [
    [
        ("insert", [(i, f"a{i}") for i in range(1, 151)]),
        ("insert", [(i, f"a{i}") for i in range(151, 301)]),
    ],
    [
        ("update", [x for i in range(1, 301, 3) for x in ((i, f"a{i}"), (i, f"b{i}"))]),
        ("delete", [(i, None) for i in range(2, 301, 10)]),
        ("update", [x for i in range(5, 50, 7) for x in ((i, "?"), (i + 1000, f"moved{i}"))]),  # key updates
        ("insert", [(2, "back")]),  # deleted above, inserted again: the last change wins
        ("update", [(1, "b1"), (1, "c1")]),
    ],
]


def model(batches: list[list[tuple[str, list[tuple[object, ...]]]]]) -> dict[object, object]:
    """The rows the events leave, applied one by one."""
    rows: dict[object, object] = {}
    for events in batches:
        for op, images_ in events:
            if op == "update":
                for before, after in zip(images_[::2], images_[1::2], strict=True):
                    rows.pop(before[0], None)
                    rows[after[0]] = after[1]
            for image in images_ if op != "update" else []:
                if op == "delete":
                    rows.pop(image[0], None)
                else:
                    rows[image[0]] = image[1]
    return rows


def test_executor_merge_equals_the_driver_merge(tmp_path: Path) -> None:
    binlog = Binlog()
    batches = [binlog.batch(*events) for events in WORKLOAD]
    executors, on_executors = applier(tmp_path, "e", merge_from=0)
    driver, in_driver = applier(tmp_path, "d", merge_from=None)
    for batch_id, envelope in enumerate(batches):
        assert executors.apply(envelope, batch_id) is not None
        assert driver.apply(envelope, batch_id) is not None
        assert content(on_executors) == content(in_driver)
    final = content(on_executors)
    assert final == model(WORKLOAD)
    # Two buckets, two data files of new rows per batch (the driver writes one).
    assert data_files(on_executors) == 4
    assert data_files(in_driver) == 2
    # A replayed batch (Spark re-runs the last one after a crash) changes nothing.
    executors.apply(batches[-1], len(batches) - 1)
    assert content(on_executors) == final
    assert list((tmp_path / "keys").glob("db.e-*/base-*"))  # positions came from the key index


def test_updates_lacking_columns_are_merged_by_the_driver(tmp_path: Path) -> None:
    binlog = Binlog()
    executors, writer = applier(tmp_path, "e", merge_from=0)
    executors.apply(binlog.batch(("insert", [(1, "a"), (2, "b")]), ("insert", [(3, "c")])), 0)
    files = data_files(writer)
    # MINIMAL images: the update of 2 carries only the key; its v keeps the stored value.
    partial = binlog.batch(
        ("update", [(1, "a"), (1, "x")]), ("update", [(2, "b"), (2, ABSENT), (3, "c"), (3, "y")])
    )
    executors.apply(partial, 1)
    assert content(writer) == {1: "x", 2: "b", 3: "y"}
    assert data_files(writer) == files + 1  # one file of the driver's, none of the buckets'


@pytest.mark.parametrize("key", [("id",), ("id", "v")])
def test_a_key_always_falls_in_the_same_bucket(key: tuple[str, ...]) -> None:
    envelope = Binlog().batch(("insert", [(i, f"v{i % 7}") for i in range(500)]), ("delete", [(7, "v0")]))
    changes = table_changes(envelope)[T.name]
    buckets = key_buckets(changes, key, 4)
    assert set(buckets.tolist()) == {0, 1, 2, 3}
    keys = images(changes, key).to_pylist()
    seen: dict[str, int] = {}
    for k, b in zip(keys, buckets.tolist(), strict=True):
        assert seen.setdefault(str(k), b) == b
    again = key_buckets(changes.slice(250), key, 4)  # another task, another slice: same buckets
    assert again.tolist() == buckets[250:].tolist()
    head = ArrowFrame(envelope).head()  # the driver's share: no change's data
    assert head.num_rows == envelope.num_rows
    assert head.column("data").null_count == head.num_rows
