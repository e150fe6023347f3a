"""The metadata applier on a real Iceberg SQL catalog: every change, on a table with data, twice."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import DecimalType, DoubleType, LongType

from binlake.events import (
    AddColumn,
    AlterColumnType,
    Column,
    CreateTable,
    DropColumn,
    DropTable,
    LoosenColumn,
    RenameColumn,
    RenameTable,
    TableId,
    TruncateTable,
)
from binlake.sink.layout import TableLayout
from binlake.sink.metadata_applier import IcebergMetadataApplier, UnsupportedSchemaChangeError

T = TableId("shop", "orders")
COLUMNS = (
    Column("id", "bigint", "bigint(20)", nullable=False),
    Column("qty", "int", "int(11)"),
    Column("weight", "float", "float"),
    Column("price", "decimal", "decimal(10,2)", precision=10, scale=2),
    Column("note", "varchar", "varchar(20)", collation="utf8mb4_general_ci"),
)
CREATE = CreateTable(T, COLUMNS, ("id",))


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    return SqlCatalog("test", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"file://{warehouse}")


@pytest.fixture
def applier(catalog: SqlCatalog) -> IcebergMetadataApplier:
    layout = TableLayout(bucket_count=4, properties={"write.target-file-size-bytes": "1048576"})
    return IcebergMetadataApplier(catalog, lambda t: (t.database, t.table), layout)


@pytest.fixture
def table(applier: IcebergMetadataApplier) -> Table:
    applier.apply(CREATE)
    table = applier.catalog.load_table("shop.orders")
    rows = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "qty": pa.array([10, None, 30], pa.int32()),
            "weight": pa.array([1.5, 2.5, None], pa.float32()),
            "price": pa.array([Decimal("1.10"), Decimal("2.20"), None], pa.decimal128(10, 2)),
            "note": ["a", "b", None],
        },
        schema=pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False),
                ("qty", pa.int32()),
                ("weight", pa.float32()),
                ("price", pa.decimal128(10, 2)),
                ("note", pa.string()),
            ]
        ),
    )
    table.append(rows)
    return applier.catalog.load_table("shop.orders")


def data_files(table: Table) -> set[str]:
    table.refresh()
    return {task.file.file_path for task in table.scan().plan_files()}


def rows(table: Table) -> dict[int, dict[str, object]]:
    table.refresh()
    return {r["id"]: r for r in table.scan().to_arrow().to_pylist()}


def test_create_uses_the_layout_and_is_idempotent(applier: IcebergMetadataApplier) -> None:
    assert applier.apply(CREATE).outcome == "applied"
    assert applier.apply(CREATE).outcome == "no-op"
    table = applier.catalog.load_table("shop.orders")
    schema = table.schema()
    assert [schema.find_column_name(i) for i in schema.identifier_field_ids] == ["id"]
    assert schema.find_field("id").required
    assert not schema.find_field("qty").required
    assert isinstance(table.spec().fields[0].transform, BucketTransform)
    assert [f.source_id for f in table.sort_order().fields] == [schema.find_field("id").field_id]
    assert table.properties["commit.retry.num-retries"] == "0"
    assert table.properties["write.target-file-size-bytes"] == "1048576"
    assert applier.supported_changes() >= {CreateTable, AddColumn, DropColumn, TruncateTable, RenameTable}


def test_keyed_tables_default_to_merge_on_read_and_keep_the_mode_they_were_made_with(
    catalog: SqlCatalog,
) -> None:
    """A keyed table made with no options merges on read, in 128 MiB files (its batches cost what
    they change); a keyless one keeps Iceberg's defaults; a layout naming a mode wins. A table made
    before (no mode: copy-on-write) stays so when the snapshot meets it again, until its layout
    names a mode."""
    default = IcebergMetadataApplier(catalog, lambda t: (t.database, t.table), TableLayout())
    default.apply(CREATE)
    default.apply(CreateTable(TableId("shop", "log"), COLUMNS, ()))
    orders = catalog.load_table("shop.orders")
    assert orders.properties["write.merge.mode"] == "merge-on-read"
    assert orders.properties["write.target-file-size-bytes"] == str(128 * 1024 * 1024)
    assert "write.merge.mode" not in catalog.load_table("shop.log").properties
    older = CreateTable(TableId("shop", "older"), COLUMNS, ("id",))
    cow = {"write.merge.mode": "copy-on-write"}
    IcebergMetadataApplier(catalog, lambda t: (t.database, t.table), TableLayout(properties=cow)).apply(older)
    assert catalog.load_table("shop.older").properties["write.merge.mode"] == "copy-on-write"
    with catalog.load_table("shop.older").transaction() as tx:
        tx.remove_properties("write.merge.mode")  # as an older release made it
    assert default.apply(older).outcome == "no-op"
    assert "write.merge.mode" not in catalog.load_table("shop.older").properties
    mor = {"write.merge.mode": "merge-on-read"}
    named = IcebergMetadataApplier(catalog, lambda t: (t.database, t.table), TableLayout(properties=mor))
    result = named.apply(older)
    assert result.outcome == "applied"
    assert "properties write.merge.mode=merge-on-read" in result.detail
    assert catalog.load_table("shop.older").properties["write.merge.mode"] == "merge-on-read"
    assert named.apply(older).outcome == "no-op"


def test_add_column_positions_and_replay(applier: IcebergMetadataApplier, table: Table) -> None:
    before = data_files(table)
    first = AddColumn(T, Column("tag", "varchar", "varchar(5)", collation="x"), "first")
    after = AddColumn(T, Column("flag", "tinyint", "tinyint(1)"), "after", "qty")
    last = AddColumn(T, Column("big", "bigint", "bigint(20)"))
    for change in (first, after, last):
        assert applier.apply(change).outcome == "applied"
        assert applier.apply(change).outcome == "no-op"
    table.refresh()
    assert [f.name for f in table.schema().fields] == [
        "tag",
        "id",
        "qty",
        "flag",
        "weight",
        "price",
        "note",
        "big",
    ]
    assert data_files(table) == before  # metadata only
    assert rows(table)[1]["tag"] is None
    assert rows(table)[1]["qty"] == 10


def test_an_added_column_holds_the_value_the_source_gave_existing_rows_in_one_commit(
    applier: IcebergMetadataApplier, table: Table
) -> None:
    """The source's ADD COLUMN with a default fills every row it held: the sink adds the column and
    rewrites the rows with that value, in one snapshot; a replay changes nothing."""
    snapshots = len(table.snapshots())
    tier = Column("tier", "varchar", "varchar(8)", default="'basic'", collation="utf8mb4_general_ci")
    change = AddColumn(T, tier, "after", "id", statement_time=1_700_000_000)
    assert applier.apply(change).detail == "3 existing rows filled"
    assert applier.apply(change).outcome == "no-op"
    count = AddColumn(T, Column("n", "int", "int(11)", nullable=False), statement_time=1_700_000_000)
    applier.apply(count)
    lenient = AddColumn(T, Column("m", "int", "int(11)", default="5"))  # binlake's own: no fill
    applier.apply(lenient)
    table.refresh()
    assert len(table.snapshots()) == snapshots + 2
    assert [f.name for f in table.schema().fields][:2] == ["id", "tier"]
    assert {(r["tier"], r["n"], r["m"]) for r in rows(table).values()} == {("basic", 0, None)}
    assert rows(table)[1]["qty"] == 10


def test_drop_and_rename_keep_old_rows_readable(applier: IcebergMetadataApplier, table: Table) -> None:
    before = data_files(table)
    assert applier.apply(RenameColumn(T, "note", "comment")).outcome == "applied"
    assert applier.apply(RenameColumn(T, "note", "comment")).outcome == "no-op"
    assert applier.apply(DropColumn(T, "weight")).outcome == "applied"
    assert applier.apply(DropColumn(T, "weight")).outcome == "no-op"
    assert data_files(table) == before
    got = rows(table)
    assert got[2]["comment"] == "b"  # the renamed column keeps its values
    assert "weight" not in got[2]
    with pytest.raises(UnsupportedSchemaChangeError, match="partitioned by `id`"):
        applier.apply(DropColumn(T, "id"))  # the bucket of the key: no key change re-partitions it


def test_a_column_rows_no_longer_fill_takes_nulls_and_a_sort_column_can_go(
    applier: IcebergMetadataApplier, table: Table
) -> None:
    """``lenient`` keeps a dropped column, loosened (a required one refused the nulls); a key
    column stays required. A column the sort order names is dropped after the order leaves it
    (pyiceberg refused: "Cannot find source column for sort field")."""
    with table.update_schema(allow_incompatible_changes=True) as update:
        update.update_column("qty", required=True)  # as for a NOT NULL column of the source
    assert applier.apply(LoosenColumn(T, "qty")).outcome == "applied"
    assert applier.apply(LoosenColumn(T, "qty")).outcome == "no-op"
    assert applier.apply(LoosenColumn(T, "id")).outcome == "no-op"
    table.refresh()
    assert not table.schema().find_field("qty").required
    assert table.schema().find_field("id").required
    with table.update_sort_order() as order:
        order.desc("weight", IdentityTransform()).asc("id", IdentityTransform())
    assert applier.apply(DropColumn(T, "weight")).outcome == "applied"
    table.refresh()
    assert [(f.source_id, f.direction.value) for f in table.sort_order().fields] == [
        (table.schema().find_field("id").field_id, "asc")
    ]
    assert rows(table)[1]["qty"] == 10


def test_widening_keeps_values(applier: IcebergMetadataApplier, table: Table) -> None:
    before = data_files(table)
    changes = [
        AlterColumnType(T, Column("qty", "bigint", "bigint(20)")),
        AlterColumnType(T, Column("weight", "double", "double")),
        AlterColumnType(T, Column("price", "decimal", "decimal(14,2)", precision=14, scale=2)),
    ]
    for change in changes:
        assert applier.apply(change).outcome == "applied"
        assert applier.apply(change).outcome == "no-op"
    table.refresh()
    schema = table.schema()
    assert isinstance(schema.find_field("qty").field_type, LongType)
    assert isinstance(schema.find_field("weight").field_type, DoubleType)
    assert schema.find_field("price").field_type == DecimalType(14, 2)
    assert data_files(table) == before
    got = rows(table)
    assert (got[1]["qty"], got[1]["weight"], got[2]["price"]) == (10, 1.5, Decimal("2.20"))


@pytest.mark.parametrize(
    ("column", "reason"),
    [
        (Column("price", "decimal", "decimal(12,3)", precision=12, scale=3), "decimal scale change"),
        (Column("price", "decimal", "decimal(8,2)", precision=8, scale=2), "not a safe type promotion"),
        (Column("qty", "varchar", "varchar(10)", collation="x"), "not a safe type promotion"),
        (Column("weight", "int", "int(11)"), "not a safe type promotion"),
    ],
)
def test_unsafe_type_changes_are_refused(
    applier: IcebergMetadataApplier, table: Table, column: Column, reason: str
) -> None:
    schema_before = table.schema()
    with pytest.raises(UnsupportedSchemaChangeError, match=reason):
        applier.apply(AlterColumnType(T, column))
    table.refresh()
    assert table.schema() == schema_before


def test_truncate_is_applied_once_per_change(applier: IcebergMetadataApplier, table: Table) -> None:
    assert applier.apply(TruncateTable(T), change_id="binlog.000003:400").outcome == "applied"
    assert rows(table) == {}
    table.append(table.scan().to_arrow().slice(0, 0))  # a later write …
    assert (
        applier.apply(TruncateTable(T), change_id="binlog.000003:400").outcome == "no-op"
    )  # … is not undone


def test_rename_and_drop_table(applier: IcebergMetadataApplier, table: Table) -> None:
    renamed = TableId("archive", "orders_2024")
    assert applier.apply(RenameTable(T, renamed)).outcome == "applied"
    assert applier.apply(RenameTable(T, renamed)).outcome == "no-op"
    assert len(rows(applier.catalog.load_table("archive.orders_2024"))) == 3
    assert applier.apply(DropTable(renamed)).outcome == "applied"
    assert applier.apply(DropTable(renamed)).outcome == "no-op"
    assert not applier.catalog.table_exists("archive.orders_2024")


def test_a_moved_column_moves_in_the_sink_once(applier: IcebergMetadataApplier, table: Table) -> None:
    """``MODIFY price DECIMAL(12,2) FIRST``: widened and moved; the replay is a no-op."""
    wider = Column("price", "decimal", "decimal(12,2)", precision=12, scale=2)
    change = AlterColumnType(T, wider, "first")
    assert applier.apply(change).outcome == "applied"
    assert applier.apply(change).outcome == "no-op"
    moved = AlterColumnType(T, Column("qty", "int", "int(11)"), "after", "note")
    assert applier.apply(moved).outcome == "applied"
    table.refresh()
    assert [f.name for f in table.schema().fields] == ["price", "id", "weight", "note", "qty"]
    assert rows(table)[1]["qty"] == 10


def test_a_table_created_again_in_the_binlog_replaces_the_sink_table(
    applier: IcebergMetadataApplier, table: Table
) -> None:
    """CREATE OR REPLACE, or DROP + CREATE under lenient: the source's rows are gone, the sink's
    too; the same creation replayed (a restart) keeps what was written since."""
    replaced = CreateTable(
        T, (Column("id", "bigint", "bigint(20)", nullable=False), Column("v", "int", "int(11)")), ("id",)
    )
    assert applier.apply(replaced).outcome == "no-op"  # a creation without a position: a snapshot's
    assert applier.apply(replaced, "mysql-bin.000003:400#1").outcome == "applied"
    again = applier.catalog.load_table("shop.orders")
    assert [f.name for f in again.schema().fields] == ["id", "v"]
    assert again.scan().to_arrow().num_rows == 0
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int32())])
    again.append(pa.table({"id": [7], "v": [1]}, schema=schema))
    assert applier.apply(replaced, "mysql-bin.000003:400#1").outcome == "no-op"
    assert applier.catalog.load_table("shop.orders").scan().to_arrow().num_rows == 1
