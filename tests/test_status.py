"""``binlake status`` from a state store: the tables the snapshot planned, and those the stream
keeps that it did not plan (created or renamed in since), each with where it began."""

from __future__ import annotations

from pathlib import Path

from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import Chunk, ChunkRange, SplitPlan
from binlake.state.store import StateStore
from binlake.status import status_in


def _schema(table: TableId) -> CreateTable:
    return CreateTable(table, (Column("id", "int", "int(11)", nullable=False),), ("id",))


def test_tables_the_stream_keeps_since_the_snapshot_are_listed(tmp_path: Path) -> None:
    planned, created, gone = TableId("db", "orders"), TableId("db", "created"), TableId("db", "gone")
    with StateStore(f"sqlite:///{tmp_path / 'state.db'}") as store:
        chunk = Chunk(planned, 0, "id", ChunkRange.all())
        store.plans("shop").save([SplitPlan(planned, "id", "single", "small", (chunk,), 1, 9, 9)])
        history = store.schema_history("shop")
        history.record(planned, BinlogOffset("binlog.000001", 4), _schema(planned), "snapshot")
        history.record(created, BinlogOffset("binlog.000002", 120), _schema(created), "CREATE TABLE")
        history.record(gone, BinlogOffset("binlog.000002", 200), _schema(gone), "CREATE TABLE")
        history.record(gone, BinlogOffset("binlog.000002", 300), None, "DROP TABLE")
        tables = status_in(store, "shop").tables
    assert [(t.table, t.strategy, t.streamed_since) for t in tables] == [
        ("db.orders", "single", None),
        ("db.created", "streamed", "binlog.000002:120 (CREATE TABLE)"),
    ]
