"""Each change's transaction in a batch: the segment's builder marks where a transaction begins
(for tables with a changelog only), the driver finds each position's GTID — across segments read
in any order, a transaction without a GTID, and positions before the first mark."""

from __future__ import annotations

import pyarrow as pa

from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.source.binlog.event_rows import EventRows
from binlake.stream.records import GTID, RecordBuilder, TransactionIds

T, U = TableId("db", "t"), TableId("db", "u")
SCHEMAS = [CreateTable(t, (Column("id", "bigint", "bigint(20)", False),), ("id",)) for t in (T, U)]


def _at(pos: int) -> BinlogOffset:
    return BinlogOffset("binlog.000003", pos)


def _segment(events: list[tuple[TableId, int, str | None]], end: int) -> pa.RecordBatch:
    builder = RecordBuilder(SCHEMAS, {}, befores=frozenset({T}))  # T keeps a changelog, U not
    for table, pos, gtid in events:
        builder.add(EventRows(table, "insert", [(pos,)], _at(pos), 1), gtid)
    builder.segment(_at(end), 1)
    return builder.batch()


def test_each_position_finds_its_transactions_gtid() -> None:
    first = _segment([(T, 100, "0-1-7"), (T, 150, "0-1-7"), (U, 200, "0-1-8"), (T, 300, "0-1-9")], 400)
    second = _segment([(T, 500, None), (T, 600, "0-1-11"), (U, 700, "0-1-12")], 800)
    head = pa.Table.from_batches([second, first])  # segments come in any order
    marks = head.filter(pa.compute.equal(head.column("kind"), GTID))
    # U keeps no changelog: its transactions are not marked; a segment's first change always is.
    assert sorted(marks.column("data").to_pylist(), key=str) == [None, b"0-1-11", b"0-1-7", b"0-1-9"]
    positions = [50, 100, 150, 300, 350, 500, 600, 650]
    found = TransactionIds(head).of(pa.chunked_array([pa.array([_at(p).packed for p in positions])]))
    assert found.to_pylist() == [None, "0-1-7", "0-1-7", "0-1-9", "0-1-9", None, "0-1-11", "0-1-11"]


def test_a_batch_without_marks_has_no_gtids() -> None:
    head = pa.Table.from_batches([_segment([(U, 100, "0-1-1")], 200)])
    positions = pa.array([_at(100).packed, _at(150).packed], pa.int64())
    assert TransactionIds(head).of(positions).to_pylist() == [None, None]
