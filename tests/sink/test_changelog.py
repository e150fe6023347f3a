"""Changelog rows from a change table (``sink/history/changelog.py``): the kinds of change, as Flink CDC
names them, when a transform's filter lets a row in or out, and with the after images alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pydantic import ValidationError

from binlake.config.modes import ModeRule
from binlake.sink.history.changelog import changelog_rows
from binlake.stream.records import images

ROW = pa.struct([("id", pa.int32()), ("v", pa.int32())])
# (op, at, idx, row): an insert; an update keeping its key; a key update; a delete
CHANGES = [
    ("insert", 100, 1, (1, 5)),
    ("before", 200, 0, (1, 5)),
    ("update", 200, 1, (1, 50)),
    ("delete", 300, 0, (1, 50)),
    ("update", 300, 1, (2, 50)),
    ("delete", (1 << 32) + 4, 0, (2, 50)),
]


def _changes() -> pa.Table:
    ops, at, idx, rows = zip(*CHANGES, strict=True)
    return pa.table(
        {
            "op": pa.array(ops),
            "at": pa.array(at, pa.int64()),
            "idx": pa.array(idx, pa.int32()),
            "ts": pa.array([1_700_000_000] * len(ops), pa.int64()),
            "row": pa.array([dict(zip(("id", "v"), r, strict=True)) for r in rows], ROW),
            "absent": pa.nulls(len(ops), pa.binary()),
        }
    )


def _rows(kept: list[bool] | None = None, updates: str = "both") -> list[tuple[str, int, int, str, int]]:
    mask = pa.array(kept) if kept is not None else None
    out = changelog_rows(_changes(), mask, images, "binlog", updates).to_pylist()
    return [(r["__op__"], r["id"], r["v"], r["__binlog_file__"], r["__binlog_pos__"]) for r in out]


def test_each_change_is_a_row_of_its_kind_at_its_position() -> None:
    assert _rows() == [
        ("+I", 1, 5, "binlog.000000", 100),
        ("-U", 1, 5, "binlog.000000", 200),
        ("+U", 1, 50, "binlog.000000", 200),
        ("-U", 1, 50, "binlog.000000", 300),  # the key update: the old row out, the new one in
        ("+U", 2, 50, "binlog.000000", 300),
        ("-D", 2, 50, "binlog.000001", 4),
    ]
    table = changelog_rows(_changes(), None, images, "binlog")
    assert table.column("__event_time__").type == pa.timestamp("us", "UTC")
    assert pc.max(table.column("__event_time__")).as_py().timestamp() == 1_700_000_000


def test_rows_a_filter_lets_in_or_out_are_inserts_and_deletes() -> None:
    # v < 10 kept: the update's after image leaves the filter, the key update's both images do
    kept = [True, True, False, False, False, False]
    assert _rows(kept) == [("+I", 1, 5, "binlog.000000", 100), ("-D", 1, 5, "binlog.000000", 200)]
    # only v >= 10 kept: the update lets the row in; the key update moves it; the delete removes it
    kept = [False, False, True, True, True, True]
    assert [r[0] for r in _rows(kept)] == ["+I", "-U", "+U", "-D"]


def test_after_images_alone() -> None:
    # the key update: the old key deleted, the new one inserted (an upsert by key stays exact)
    assert [r[0] for r in _rows(updates="after")] == ["+I", "+U", "-D", "+I", "-D"]


def test_a_mode_rule_keeps_any_of_the_tables() -> None:
    assert ModeRule(source_table="a\\.b", mode="upsert").mode == ["upsert"]
    assert ModeRule(source_table="a\\.b", mode=["upsert", "changelog"]).changelog
    alone = ModeRule(source_table="a\\.b", mode="changelog")  # the changelog holds the state
    assert alone.changelog
    assert not alone.upsert
    assert not ModeRule(source_table="a\\.b", mode=["history"]).upsert
    with pytest.raises(ValidationError, match="listed twice"):
        ModeRule(source_table="a\\.b", mode=["upsert", "upsert"])
    with pytest.raises(ValidationError, match="names no mode"):
        ModeRule(source_table="a\\.b", mode=[])
    with pytest.raises(ValidationError, match="keeps deleted rows, marked, in the upsert table"):
        ModeRule(source_table="a\\.b", mode=["changelog"], soft_delete=True)


def test_the_tables_a_rule_keeps_beside_the_upsert_table(tmp_path: Path) -> None:
    from binlake.config import PipelineConfig
    from binlake.events import TableId
    from binlake.sink.history.companions import sink_tables

    raw = {
        "pipeline": {"name": "p", "work_dir": str(tmp_path)},
        "source": {"hostname": "h", "username": "u", "password": "x", "tables": ["shop\\..*"]},
        "sink": {"modes": [{"source_table": "shop\\.orders", "mode": ["upsert", "changelog", "history"]}]},
    }
    config = PipelineConfig.model_validate(raw)
    assert sink_tables(config, [TableId("shop", "orders"), TableId("shop", "items")]) == {
        "shop.orders", "shop.orders_changelog", "shop.orders_history", "shop.items",
    }  # fmt: skip


def test_a_changelog_starts_from_and_clears_an_upsert_table_whose_file_lost_every_row(tmp_path: Path) -> None:
    """A merge-on-read upsert table can hold a data file whose every row is deleted: the changelog
    takes no rows from it (its partitioned write of nothing failed)."""
    from binlake.offsets import BinlogOffset
    from binlake.sink.history.changelog import ensure_changelog
    from binlake.sink.history.changelog_writer import ChangelogWriter
    from binlake.sink.history.state_table import StateTable
    from binlake.sink.writer import IcebergWriter
    from tests.sink.helpers import create, make_catalog, rows

    catalog = make_catalog(tmp_path)
    upsert = IcebergWriter(catalog, create(catalog), key_index_dir=tmp_path / "index")
    assert upsert.table.properties["write.merge.mode"] == "merge-on-read"  # the default
    upsert.table.append(rows([1, 2], "v"))
    upsert.table.append(rows([3], "v"))
    upsert.merge_batch(1, rows([2], "u"), pa.table({"id": pa.array([3], pa.int64())}))
    ensure_changelog(catalog, "db.t_changelog", upsert.table.schema())
    changelog = ChangelogWriter(catalog, "db.t_changelog")
    at = BinlogOffset("binlog.000001", 400)
    state = StateTable.upsert(upsert.table)
    assert changelog.start_from(state, at, []) == 2
    assert changelog.remove_all(state, BinlogOffset("binlog.000001", 500), "truncate#1", 1_700_000_000) == 2
    found = sorted((r["__op__"], r["id"], r["v"]) for r in changelog.table.scan().to_arrow().to_pylist())
    assert found == [("+I", 1, "v1"), ("+I", 2, "u2"), ("-D", 1, "v1"), ("-D", 2, "u2")]


def test_a_filled_column_is_an_update_of_each_row_of_its_source() -> None:
    """Each row the fill gave the value: its ``-U`` without it and its ``+U`` with it (``+U`` alone
    for ``changelog_updates: after``), at the statement, ordered after the statement's earlier
    changes; on a routed table only the rows of the source that added the column."""
    from binlake.offsets import BinlogOffset
    from binlake.sink.history.changelog import ColumnFill, filled_rows

    rows = pa.table({"_source_table": ["d.a", "d.b"], "id": [1, 1], "c": pa.array([None, None], pa.int64())})
    at = BinlogOffset("binlog.000003", 900)
    fill = ColumnFill("c", None, pa.scalar(5), "d.a", at, 2, "x#2", 60)
    both = filled_rows(rows, fill, after_only=False).to_pylist()
    assert [(r["_source_table"], r["__op__"], r["c"], r["__order__"], r["__origin__"]) for r in both] == [
        ("d.a", "-U", None, 4, "schema"),
        ("d.a", "+U", 5, 5, "schema"),
    ]
    assert {r["__position__"] for r in both} == {at.packed}
    after = filled_rows(rows, fill, after_only=True).to_pylist()
    assert [(r["__op__"], r["c"]) for r in after] == [("+U", 5)]


def test_a_changelog_follows_renames_promotions_and_a_column_added_again_with_another_type(
    tmp_path: Path,
) -> None:
    """Columns the sink table promoted are promoted; one it dropped and added again with a type the
    old one cannot take is renamed aside (earlier rows keep their values) and the new one added."""
    from pyiceberg.types import LongType

    from binlake.sink.history.changelog import ensure_changelog
    from tests.sink.helpers import create, make_catalog

    catalog = make_catalog(tmp_path)
    upsert = catalog.load_table(create(catalog))
    changelog = ensure_changelog(catalog, "db.t_changelog", upsert.schema())
    assert changelog.schema().find_field("v").field_type == upsert.schema().find_field("v").field_type
    with upsert.update_schema() as update:
        update.delete_column("v")
    with upsert.update_schema() as update:
        update.add_column("v", LongType())
    changelog = ensure_changelog(catalog, "db.t_changelog", upsert.schema())
    names = changelog.schema().column_names
    assert changelog.schema().find_field("v").field_type == LongType()
    assert "v__string" in names
    again = ensure_changelog(catalog, "db.t_changelog", upsert.schema())  # nothing more to do
    assert again.schema().column_names == names


def test_a_renamed_tables_changelog_and_history_take_its_new_name(tmp_path: Path) -> None:
    """Each companion the old name keeps and the new name keeps moves to the new name (an empty one
    made there before is replaced); a replay finds it done; one holding rows there goes aside."""
    from binlake.config import PipelineConfig
    from binlake.events import TableId
    from binlake.schema.table_rules import table_rules
    from binlake.sink.history.companions import ensure_companions, mark_renamed, rename_companions
    from binlake.sink.history.state_table import StateTable
    from tests.sink.helpers import create, make_catalog

    raw = {
        "pipeline": {"name": "p", "work_dir": str(tmp_path)},
        "source": {"hostname": "h", "username": "u", "password": "x", "tables": ["db\\..*"]},
        "sink": {"modes": [{"source_table": "db\\.t.*", "mode": ["upsert", "changelog", "history"]}]},
    }
    config = PipelineConfig.model_validate(raw)
    old, new = table_rules(config, TableId("db", "t")), table_rules(config, TableId("db", "t2"))
    catalog = make_catalog(tmp_path)
    upsert = StateTable.upsert(catalog.load_table(create(catalog)))
    ensure_companions(old, catalog, upsert)
    _with_row(catalog, "db.t_changelog")
    ensure_companions(new, catalog, upsert)  # made empty for the new name before the rename came
    assert rename_companions(old, new, catalog, "__before_x") == [
        "db.t_changelog → db.t2_changelog",
        "db.t_history → db.t2_history",
    ]
    names = {".".join(i) for i in catalog.list_tables("db")}
    assert {"db.t2_changelog", "db.t2_history"} <= names
    assert not {"db.t_changelog", "db.t_history"} & names
    assert catalog.load_table("db.t2_changelog").scan().to_arrow().num_rows == 1  # its past came along
    for identifier in ("db.t2_changelog", "db.t2_history"):
        mark_renamed(catalog, identifier, "__before_x")  # as the stream does once they have the name
    assert rename_companions(old, new, catalog, "__before_x") == []  # a replay
    ensure_companions(old, catalog, upsert)
    _with_row(catalog, "db.t_changelog")
    moved = rename_companions(old, new, catalog, "__before_y")  # t2's past (a dropped t2's) goes aside
    assert moved[:2] == ["db.t2_changelog → db.t2_changelog__before_y", "db.t_changelog → db.t2_changelog"]
    assert catalog.load_table("db.t2_changelog__before_y").scan().to_arrow().num_rows == 1


def _with_row(catalog: Any, identifier: str) -> None:
    """One ``+I`` row appended to ``identifier`` (null but for its key and kind)."""
    table = catalog.load_table(identifier)
    schema = table.schema().as_arrow()
    values = {f.name: pa.array([1] if f.name == "id" else [None], f.type) for f in schema}
    values["__op__"] = pa.array(["+I"], schema.field("__op__").type)
    table.append(pa.table(values, schema=schema))
