"""Compaction of a micro-batch: last change per key; whole-row netting for keyless tables; and the
change tables executors pack for the driver."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa

from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.source.binlog.event_rows import EventRows
from binlake.stream.envelope import SPARK_SCHEMA
from binlake.stream.records import ENVELOPE_SCHEMA, SEGMENT, RecordBuilder, change_schema, table_changes
from binlake.stream.shares.last_changes import last_per_key, net_rows

T = TableId("db", "t")
KEYED = CreateTable(T, (Column("id", "int", "int", False), Column("v", "varchar", "varchar(10)")), ("id",))
KEYLESS = CreateTable(T, (Column("id", "int", "int"), Column("v", "varchar", "varchar(10)")))


def changes(schema: CreateTable, *rows: tuple[str, tuple[Any, ...]]) -> pa.Table:
    names = schema.column_names
    return pa.Table.from_pylist(
        [
            {"op": op, "at": at, "idx": 0, "ts": 0, "row": dict(zip(names, image, strict=False))}
            for at, (op, image) in enumerate(rows)
        ],
        schema=change_schema(schema),
    )


def test_last_change_per_key_wins() -> None:
    result = last_per_key(
        changes(
            KEYED,
            ("insert", (1, "a")),
            ("insert", (2, "b")),
            ("delete", (1,)),  # a delete wins over the earlier insert
            ("update", (2, "c")),
            ("delete", (3,)),
            ("insert", (3, "again")),  # an insert after a delete is an upsert
        ),
        ("id",),
    )
    assert sorted(result.upserts.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 2, "v": "c"},
        {"id": 3, "v": "again"},
    ]
    assert result.deletes.to_pylist() == [{"id": 1}]
    assert result.ops is not None  # the last change's kind, per upsert (``__data_event_type__``)
    kinds = dict(zip(result.upserts.column("id").to_pylist(), result.ops.to_pylist(), strict=True))
    assert kinds == {2: "update", 3: "insert"}


def test_keyless_rows_net_out_and_keep_duplicates() -> None:
    result = net_rows(
        changes(
            KEYLESS,
            ("insert", (1, "x")),
            ("insert", (1, "x")),
            ("insert", (1, "x")),
            ("delete", (1, "x")),
            ("delete", (2, "y")),
            ("insert", (3, "z")),
            ("delete", (3, "z")),
            ("delete", (None, None)),
            ("delete", (None, None)),
        )
    )
    assert result.inserts.to_pylist() == [{"id": 1, "v": "x"}] * 2  # duplicates stay exact
    assert sorted(result.removes.to_pylist(), key=str) == sorted(
        [{"id": 2, "v": "y"}, {"id": None, "v": None}, {"id": None, "v": None}], key=str
    )


def test_executor_blocks_round_trip_typed_in_binlog_order() -> None:
    """What executors pack is what the driver unpacks: typed columns, key updates split, order by
    position across blocks (two blocks of one segment arrive in any order)."""
    schema = CreateTable(
        T,
        (
            Column("id", "bigint", "bigint", False),
            Column("amount", "decimal", "decimal(12,2)", precision=12, scale=2),
            Column("at", "datetime", "datetime(6)", fsp=6),
        ),
        ("id",),
    )
    builder = RecordBuilder([schema], {})
    first, second = BinlogOffset("binlog.000002", 100), BinlogOffset("binlog.000002", 200)
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 6)
    builder.add(EventRows(T, "insert", [(1, Decimal("1.50"), when)], first, 10))
    earlier = builder.batch()
    builder.add(EventRows(T, "update", [(1, None, None), (2, Decimal("2.00"), None)], second, 11))
    builder.add(EventRows(T, "delete", [(2, None, None)], BinlogOffset("binlog.000002", 250), 11))
    builder.segment(BinlogOffset("binlog.000002", 300), 11)
    later = builder.batch()
    envelope = pa.Table.from_batches([later, earlier], schema=ENVELOPE_SCHEMA)
    assert envelope.column("kind").to_pylist().count(SEGMENT) == 1
    [(name, table)] = table_changes(envelope).items()
    assert name == "db.t"
    assert table.schema == change_schema(schema)
    assert [(r["op"], r["row"]) for r in table.to_pylist()] == [
        ("insert", {"id": 1, "amount": Decimal("1.50"), "at": when}),
        ("delete", {"id": 1, "amount": None, "at": None}),  # the key changed: the old key goes
        ("update", {"id": 2, "amount": Decimal("2.00"), "at": None}),
        ("delete", {"id": 2, "amount": None, "at": None}),
    ]
    final = last_per_key(table, ("id",))
    assert final.upserts.num_rows == 0
    assert sorted(final.deletes.column("id").to_pylist()) == [1, 2]


def test_envelope_batches_have_the_schema_spark_is_told() -> None:
    # Spark checks every batch a read yields against the source's schema (a mismatch fails the task).
    arrow = {"STRING": pa.string(), "BINARY": pa.binary(), "BIGINT": pa.int64()}
    declared = [field.split() for field in SPARK_SCHEMA.split(", ")]
    assert pa.schema([(name, arrow[kind]) for name, kind in declared]) == ENVELOPE_SCHEMA
