"""Schema changes of tables kept without an upsert table (``sink/history/state_applier.py``): the
state table (a changelog, a history) and the one beside it gain added columns and widened types,
keep dropped columns, and refuse what the upsert table's applier refuses — and a new key where
versions would no longer be told apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.config import PipelineConfig
from binlake.events import (
    AddColumn,
    AlterColumnType,
    AlterPrimaryKey,
    Column,
    CreateTable,
    DropColumn,
    RenameTable,
    TableId,
)
from binlake.schema.behaviors import SchemaChangeRefusedError
from binlake.schema.table_rules import table_rules
from binlake.sink.history.state_applier import StateTableApplier
from binlake.sink.history.state_table import state_table
from binlake.sink.layout import TableLayout
from binlake.sink.metadata_applier import CREATED_ID, UnsupportedSchemaChangeError
from binlake.stream.schema_changes import _kept_alike
from tests.sink.helpers import make_catalog

T = TableId("db", "t")
ID = Column("id", "int", "int(11)", nullable=False)
N = Column("n", "int", "int(11)")


def _config(tmp_path: Path, mode: list[str]) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "pipeline": {"name": "p", "work_dir": str(tmp_path)},
            "source": {"hostname": "h", "username": "u", "password": "x", "tables": ["db\\..*"]},
            "sink": {
                "modes": [
                    {"source_table": "db\\.t", "mode": mode},
                    {"source_table": "db\\.u", "mode": "upsert"},
                ]
            },
        }
    )


def _applier(tmp_path: Path, mode: list[str]) -> tuple[StateTableApplier, PipelineConfig]:
    config = _config(tmp_path, mode)
    applier = StateTableApplier(
        make_catalog(tmp_path), lambda t: table_rules(config, t), lambda t: TableLayout()
    )
    return applier, config


def test_columns_added_widened_and_dropped_follow_the_changelogs_rule(tmp_path: Path) -> None:
    applier, config = _applier(tmp_path, ["changelog", "history"])
    create = CreateTable(T, (ID, N), ("id",))
    assert applier.apply(create, "binlog.000001:4#0").outcome == "applied"
    assert applier.apply(create, "binlog.000001:4#0").outcome == "no-op"  # a replay
    assert not applier.replaces(create, "binlog.000001:4#0")
    assert applier.replaces(create, "binlog.000002:4#0")  # created again: its rows leave first
    rules = table_rules(config, T)
    state = state_table(rules, applier.catalog)
    assert state is not None
    assert state.identifier == "db.t_history"
    assert state.table.properties[CREATED_ID] == "binlog.000001:4#0"
    assert applier.catalog.table_exists("db.t_changelog")  # kept beside it, made with it

    applier.apply(AddColumn(T, Column("c", "varchar", "varchar(5)")))
    applier.apply(AlterColumnType(T, Column("n", "bigint", "bigint(20)")))
    applier.apply(DropColumn(T, "c"))  # kept: earlier rows hold it
    for name in ("db.t_history", "db.t_changelog"):
        schema = applier.catalog.load_table(name).schema()
        assert {"c", "n"} <= set(schema.column_names), name
        assert str(schema.find_field("n").field_type) == "long", name
    with pytest.raises(UnsupportedSchemaChangeError, match="not a safe type promotion"):
        applier.apply(AlterColumnType(T, Column("n", "varchar", "varchar(5)")))
    assert not applier.can_alter(AlterColumnType(T, Column("n", "varchar", "varchar(5)")))
    assert applier.can_alter(AlterColumnType(T, Column("n", "bigint", "bigint(20)")))
    # Added again with a type the kept one cannot take: the old values go aside, named by type.
    applier.apply(AddColumn(T, Column("c", "int", "int(11)")))
    names = applier.catalog.load_table("db.t_history").schema().column_names
    assert {"c", "c__string"} <= set(names)


def test_a_new_key_is_refused_where_versions_would_mix(tmp_path: Path) -> None:
    applier, _ = _applier(tmp_path, ["history"])
    applier.apply(CreateTable(T, (ID, N), ("id",)))
    assert applier.apply(AlterPrimaryKey(T, ("id",))).outcome == "no-op"
    with pytest.raises(UnsupportedSchemaChangeError, match="keeps no upsert table to merge on the new one"):
        applier.apply(AlterPrimaryKey(T, ("id", "n")))


def test_a_signed_changelog_takes_a_new_key(tmp_path: Path) -> None:
    applier, config = _applier(tmp_path, ["changelog"])
    applier.apply(CreateTable(T, (ID, N), ("id",)))
    assert applier.apply(AlterPrimaryKey(T, ("id", "n"))).outcome == "applied"
    state = state_table(table_rules(config, T), applier.catalog)
    assert state is not None
    assert state.keys() == ["id", "n"]


def test_a_rename_between_names_kept_unalike_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path, ["changelog"])
    with pytest.raises(SchemaChangeRefusedError, match="keeps an upsert table and the other's does not"):
        _kept_alike(config, RenameTable(T, TableId("db", "u")))
    _kept_alike(config, RenameTable(T, TableId("db", "t")))  # alike: nothing to say


def test_a_table_without_a_key_kept_as_a_history_alone_is_refused(tmp_path: Path) -> None:
    keyless = CreateTable(T, (ID, N), ())
    for mode in (["history"], ["changelog", "history"]):  # the history would hold its state
        with pytest.raises(SchemaChangeRefusedError, match="without a primary key"):
            _kept_alike(_config(tmp_path, mode), keyless)
    _kept_alike(_config(tmp_path, ["changelog"]), keyless)
