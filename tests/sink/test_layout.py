"""Sink layouts on a real Iceberg catalog (issue 44): partition specs and sort orders from rules,
partition evolution, the snapshot's one-partition files, and merges that move rows between
partitions."""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.table.sorting import NullOrder
from pyiceberg.transforms import IdentityTransform

from binlake.config import PipelineConfig
from binlake.config.layout import parse_partition_term, parse_sort_term
from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.sink.exactly_once import ChunkCommit
from binlake.sink.layout import LayoutError, TableLayout, describe, evolve, layout_of
from binlake.sink.maintenance import compact
from binlake.sink.metadata_applier import IcebergMetadataApplier
from binlake.sink.partition_files import Partitioning
from binlake.sink.writer import IcebergWriter
from tests.sink.helpers import make_catalog

T = TableId("shop", "orders")
COLUMNS = (
    Column("id", "bigint", "bigint(20)", nullable=False),
    Column("tenant", "int", "int(11)"),
    Column("at", "datetime", "datetime(6)", fsp=6),
    Column("sku", "varchar", "varchar(40)", collation="utf8mb4_bin"),
    Column("region", "varchar", "varchar(10)", collation="utf8mb4_bin"),
)
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("tenant", pa.int32()),
        ("at", pa.timestamp("us")),
        ("sku", pa.string()),
        ("region", pa.string()),
    ]
)
TERMS = ("day(at)", "bucket(4, tenant)", "truncate(3, sku)", "region")


def _layout(partition_by: tuple[str, ...] = TERMS, sort_by: tuple[str, ...] = ()) -> TableLayout:
    return TableLayout(
        properties={},
        partition_by=tuple(parse_partition_term(t) for t in partition_by),
        sort_by=tuple(parse_sort_term(t) for t in sort_by),
        rule="test",
    )


def _create(catalog: SqlCatalog, layout: TableLayout, properties: dict[str, str] | None = None) -> Table:
    layout = TableLayout(None, properties or {}, layout.partition_by, layout.sort_by, layout.rule)
    IcebergMetadataApplier(catalog, lambda t: (t.database, t.table), layout).apply(
        CreateTable(T, COLUMNS, ("id",))
    )
    return catalog.load_table("shop.orders")


def _rows(n: int, day_shift: int = 0, first: int = 1) -> pa.Table:
    start = dt.datetime(2026, 1, 1)
    times = [start + dt.timedelta(days=(i + day_shift) % 9, seconds=i) for i in range(n)]
    return pa.table(
        {
            "id": pa.array(range(first, first + n), pa.int64()),
            "tenant": pa.array([i % 7 for i in range(n)], pa.int32()),
            "at": pa.array(times, pa.timestamp("us")),
            # long texts sharing their first 16 characters: bounds are truncated there
            "sku": [f"a-very-long-shared-prefix-{i % 5}" if i % 4 else None for i in range(n)],
            "region": [["eu", "us", None][i % 3] for i in range(n)],
        },
        schema=SCHEMA,
    )


def test_a_rule_gives_the_spec_and_the_sort_order(tmp_path: Path) -> None:
    table = _create(make_catalog(tmp_path), _layout(sort_by=("at DESC NULLS LAST", "id")))
    assert describe(table) == {
        "partition_by": ["day(at)", "bucket(4, tenant)", "truncate(3, sku)", "identity(region)"],
        "sort_by": ["at DESC NULLS LAST", "id ASC NULLS FIRST"],
    }


@pytest.mark.parametrize(
    ("terms", "found"),
    [
        (("day(nope)",), "no such column"),
        (("day(sku)",), "cannot take"),
        (("truncate(2, at)",), "cannot take"),
    ],
)
def test_a_rule_that_does_not_fit_the_table_is_refused(
    tmp_path: Path, terms: tuple[str, ...], found: str
) -> None:
    with pytest.raises(LayoutError, match=found) as e:
        _create(make_catalog(tmp_path), _layout(terms))
    assert "Fix:" in str(e.value)


def test_a_changed_rule_evolves_the_spec_and_keeps_the_old_files(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    table = _create(catalog, _layout())
    table.append(_rows(100))
    assert evolve(table, _layout(), ["id"]) == []  # as asked already: nothing
    changed = evolve(table, _layout(("month(at)", "bucket(4, tenant)"), ("at",)), ["id"])
    assert changed == ["partition spec month(at), bucket(4, tenant)", "sort order at ASC NULLS FIRST"]
    table = catalog.load_table("shop.orders")
    assert sorted(describe(table)["partition_by"]) == ["bucket(4, tenant)", "month(at)"]
    table.append(_rows(50, day_shift=3, first=101))
    specs = Counter(t.file.spec_id for t in table.scan().plan_files())
    assert set(specs) == {0, 1}
    before = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert len(before) == 150
    assert evolve(table, _layout(("month(at)", "bucket(4, tenant)"), ("at",)), ["id"]) == []
    # `binlake maintain --rewrite-partitions`: the old spec's files rewritten into the new one
    assert compact(table, rewrite_partitions=True)[0] >= specs[0]
    table.refresh()
    assert {t.file.spec_id for t in table.scan().plan_files()} == {1}
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == before


def _partitions(table: Table) -> Counter[tuple[str, int]]:
    return Counter((repr(t.file.partition), t.file.record_count) for t in table.scan().plan_files())


def test_snapshot_files_split_by_partition_get_the_partitions_pyiceberg_gives(tmp_path: Path) -> None:
    """Files written as the snapshot's tasks write them (one partition each) are added with
    exactly the partitions pyiceberg's own append gives the same rows — bucket and truncated text
    bounds included, NULLs in a partition of their own."""
    catalog = make_catalog(tmp_path)
    table = _create(catalog, _layout())
    rows = _rows(400)
    partitioning = Partitioning.of(table.metadata)
    assert partitioning is not None
    paths = []
    for i, (_, part) in enumerate(partitioning.split(rows)):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(part, path)
        paths.append(f"file://{path}")
    writer = IcebergWriter(catalog, "shop.orders")
    offset = BinlogOffset("bin.000001", 4)
    assert writer.append_files(paths, [ChunkCommit("0", offset, rows.num_rows)]).outcome == "committed"
    IcebergMetadataApplier(catalog, lambda t: ("shop", "reference"), _layout()).apply(
        CreateTable(T, COLUMNS, ("id",))
    )
    reference = catalog.load_table("shop.reference")
    reference.append(rows)
    table.refresh()
    assert _partitions(table) == _partitions(reference)
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == rows.to_pylist()
    # a day's scan plans that day's files only
    day = table.scan(row_filter="at >= '2026-01-02T00:00:00' and at < '2026-01-03T00:00:00'")
    assert 0 < len(list(day.plan_files())) <= len(paths) / 5


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_updates_that_move_rows_between_partitions_leave_nothing_behind(tmp_path: Path, mode: str) -> None:
    catalog = make_catalog(tmp_path)
    _create(catalog, _layout(), {"write.merge.mode": mode})
    writer = IcebergWriter(catalog, "shop.orders", key_index_dir=tmp_path / "index")
    rows = _rows(200)
    writer.merge_batch(1, rows)
    moved = _rows(200, day_shift=4).filter(pa.compute.less(pa.compute.field("id"), 60))
    moved = moved.set_column(1, SCHEMA.field("tenant"), pa.compute.add(moved["tenant"], 1).cast(pa.int32()))
    deleted = pa.table({"id": pa.array([150, 151, 199], pa.int64())})
    writer.merge_batch(2, moved, deleted)
    writer.table.refresh()
    expected = {r["id"]: r for r in rows.to_pylist() if r["id"] not in (150, 151, 199)}
    expected.update({r["id"]: r for r in moved.to_pylist()})
    found = writer.table.scan().to_arrow().to_pylist()
    assert len(found) == len(expected)
    assert {r["id"]: r for r in found} == expected
    # every row sits in a file of its own partition (a moved row left its old one)
    partitioning = Partitioning.of(writer.table.metadata)
    assert partitioning is not None
    for task in writer.table.scan().plan_files():
        for _, part in partitioning.split(pq.read_table(task.file.file_path.removeprefix("file://"))):
            assert partitioning.partition(part) == task.file.partition


def _validate(base: dict[str, object], layout: list[dict[str, object]]) -> PipelineConfig:
    return PipelineConfig.model_validate({**base, "sink": {"layout": layout}})


def test_rules_match_by_source_table_first_wins_over_the_sink_defaults() -> None:
    base = {
        "pipeline": {"name": "p"},
        "source": {"hostname": "h", "username": "u", "password": "x", "tables": ["shop\\..*"]},
    }
    config = PipelineConfig.model_validate(
        {
            **base,
            "sink": {
                "bucket_count": 8,
                "table_properties": {
                    "write.merge.mode": "merge-on-read",
                    "write.target-file-size-bytes": "1000",
                },
                "layout": [
                    {
                        "source_table": r"shop\.orders",
                        "partition_by": ["day(at)"],
                        "properties": {"write.target-file-size-bytes": "2000"},
                    },
                    {"source_table": r"shop\..*", "sort_by": ["at DESC"]},
                ],
            },
        }
    )
    orders = layout_of(config, TableId("shop", "orders"))
    assert [str(t) for t in orders.partition_by] == ["day(at)"]
    assert orders.properties == {"write.merge.mode": "merge-on-read", "write.target-file-size-bytes": "2000"}
    other = layout_of(config, TableId("shop", "items"))
    assert other.partition_by == ()
    assert [str(t) for t in other.sort_by] == ["at DESC NULLS LAST"]
    assert layout_of(config, TableId("crm", "x")).bucket_count == 8
    with pytest.raises(ValueError, match="bucket takes a width"):
        PipelineConfig.model_validate(
            {**base, "sink": {"layout": [{"source_table": "x", "partition_by": ["bucket(a)"]}]}}
        )
    with pytest.raises(ValueError, match="not a table property pyiceberg acts on"):
        _validate(base, [{"source_table": "x", "properties": {"write.target-file-sise-bytes": "1"}}])
    with pytest.raises(ValueError, match="binlake retries a conflicting commit itself"):
        PipelineConfig.model_validate(
            {**base, "sink": {"table_properties": {"commit.retry.num-retries": "3"}}}
        )
    with pytest.raises(ValueError, match="listed twice"):
        PipelineConfig.model_validate(
            {**base, "sink": {"layout": [{"source_table": "x", "sort_by": ["a", "a DESC"]}]}}
        )


def test_a_sort_column_the_source_dropped_leaves_the_rest_of_the_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``evolve`` took the column out of the sort order and dropped it; at the next start the rule
    still names it: the table keeps the rest of the order, with a warning, instead of stopping. A
    column the table never had is still a mistake in the rule."""
    catalog = make_catalog(tmp_path)
    table = _create(catalog, _layout((), ("sku", "id")))
    with table.update_sort_order() as update:
        update.asc("id", IdentityTransform(), NullOrder.NULLS_FIRST)
    with table.update_schema() as update:
        update.delete_column("sku")
    with caplog.at_level(logging.WARNING, logger="binlake.sink.layout"):
        assert evolve(table, _layout((), ("sku", "id")), ["id"]) == []
    assert "sorts by `sku`, which the table no longer has" in caplog.text
    assert describe(catalog.load_table("shop.orders"))["sort_by"] == ["id ASC NULLS FIRST"]
    with pytest.raises(LayoutError, match="no such column"):
        evolve(table, _layout((), ("nope", "id")), ["id"])
