"""What each ``pipeline.schema_change_behavior`` makes of a source change, without Spark or Iceberg."""

from __future__ import annotations

import pytest

from binlake.events import (
    AddColumn,
    AlterColumnType,
    Column,
    CreateTable,
    DropColumn,
    DropTable,
    LoosenColumn,
    PartitionRowsChanged,
    RenameColumn,
    RenameTable,
    TableId,
    TruncateTable,
)
from binlake.schema.behaviors import SchemaChangeRefusedError, sink_changes

T = TableId("db", "t")
V = Column("v", "int", "int(11)")
W = Column("w", "int", "int(11)")
AFTER = CreateTable(T, (Column("id", "int", "int(11)", nullable=False), W), ("id",))
WIDER = AlterColumnType(T, Column("v", "bigint", "bigint(20)"))
TEXT = AlterColumnType(T, Column("v", "varchar", "varchar(10)"))


@pytest.mark.parametrize("behavior", ["evolve", "try_evolve"])
def test_evolve_makes_the_same_change(behavior: str) -> None:
    for change in (DropColumn(T, "v"), RenameColumn(T, "v", "w"), TruncateTable(T), TEXT):
        assert sink_changes(change, behavior, False, AFTER) == [change]


def test_lenient_loses_nothing() -> None:
    """A column rows no longer fill (dropped, renamed away, its values moved to a new column) stays,
    loosened: one the source had NOT NULL refused the nulls, and the stream stopped at every run."""
    assert sink_changes(DropColumn(T, "v"), "lenient", False, AFTER) == [LoosenColumn(T, "v")]
    assert sink_changes(TruncateTable(T), "lenient", False, AFTER) == []
    assert sink_changes(RenameColumn(T, "v", "w"), "lenient", False, AFTER) == [
        AddColumn(T, W),
        LoosenColumn(T, "v"),
    ]
    assert sink_changes(WIDER, "lenient", True, AFTER) == [WIDER]
    shadow, loosened = sink_changes(TEXT, "lenient", False, AFTER)
    assert shadow == AddColumn(T, Column("v__varchar", "varchar", "varchar(10)"))
    assert loosened == LoosenColumn(T, "v")


def test_exception_refuses_all_but_a_new_table() -> None:
    assert sink_changes(AFTER, "exception", False, AFTER) == [AFTER]
    with pytest.raises(SchemaChangeRefusedError, match="exception"):
        sink_changes(AddColumn(T, V), "exception", False, AFTER)


def test_ignore_never_changes_the_sink() -> None:
    """But for a column rows no longer fill: it takes nulls (a NOT NULL one stopped the stream)."""
    assert sink_changes(AFTER, "ignore", False, AFTER) == []
    assert sink_changes(AddColumn(T, V), "ignore", False, AFTER) == []
    assert sink_changes(WIDER, "ignore", True, AFTER) == []
    assert sink_changes(DropColumn(T, "v"), "ignore", False, AFTER) == [LoosenColumn(T, "v")]
    assert sink_changes(RenameColumn(T, "v", "w"), "ignore", False, AFTER) == [LoosenColumn(T, "v")]
    assert sink_changes(TEXT, "ignore", False, AFTER) == [LoosenColumn(T, "v")]


def test_rows_changed_without_row_events_change_no_schema() -> None:
    """The stream heals them under (try_)evolve (``stream/server_filled.py``); lenient keeps the rows."""
    change = PartitionRowsChanged(T, "TRUNCATE PARTITION")
    for behavior in ("evolve", "try_evolve", "lenient", "ignore"):
        assert sink_changes(change, behavior, False, AFTER) == []
    with pytest.raises(SchemaChangeRefusedError):
        sink_changes(change, "exception", False, AFTER)


def test_a_routed_sink_table_takes_no_table_level_change_of_one_source_but_the_removal_of_its_rows() -> None:
    assert sink_changes(RenameTable(T, TableId("db", "t2")), "evolve", False, AFTER, routed=True) == []
    # the other sources still fill it: kept, taking this one's nulls
    assert sink_changes(DropColumn(T, "v"), "evolve", False, AFTER, routed=True) == [LoosenColumn(T, "v")]
    for behavior in ("evolve", "try_evolve"):  # the shard's own rows leave the shared table
        for removal in (TruncateTable(T, 7), DropTable(T, 7)):
            (made,) = sink_changes(removal, behavior, False, AFTER, routed=True)
            assert made == TruncateTable(T)
            assert made.statement_time == 7
    assert sink_changes(TruncateTable(T), "lenient", False, AFTER, routed=True) == []
    assert sink_changes(DropTable(T), "lenient", False, AFTER, routed=True) == []
