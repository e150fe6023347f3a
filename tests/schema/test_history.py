"""Schema versions: how each change moves a table's schema (the server checks column changes in
``tests/source/ddl/test_ddl_parser.py``; here the table-level ones and the refusals)."""

from __future__ import annotations

import pytest

from binlake.events import (
    AddColumn,
    Column,
    CreateTable,
    DropColumn,
    DropTable,
    RenameColumn,
    RenameTable,
    TableId,
    TruncateTable,
)
from binlake.schema.history import SchemaEvolutionError, evolve

T, U = TableId("db", "t"), TableId("db", "u")
ID = Column("id", "int", "int(11)", nullable=False)
V = Column("v", "varchar", "varchar(5)", length=5)
SCHEMA = CreateTable(T, (ID, V), ("id",))


def test_table_level_changes() -> None:
    assert evolve(T, None, SCHEMA) == SCHEMA
    assert evolve(T, SCHEMA, TruncateTable(T)) == SCHEMA
    assert evolve(T, SCHEMA, DropTable(T)) is None
    assert evolve(T, SCHEMA, RenameTable(T, U)) is None
    assert evolve(U, SCHEMA, RenameTable(T, U)) == CreateTable(U, (ID, V), ("id",))
    assert evolve(U, SCHEMA, DropTable(T)) == SCHEMA  # another table's change


def test_key_columns_follow_renames_and_drops() -> None:
    renamed = evolve(T, SCHEMA, RenameColumn(T, "ID", "key"))
    assert renamed is not None
    assert renamed.primary_key == ("key",)
    assert renamed.column_names == ("key", "v")
    dropped = evolve(T, SCHEMA, DropColumn(T, "id"))
    assert dropped is not None
    assert dropped.primary_key == ()
    assert dropped.column_names == ("v",)


def test_positions() -> None:
    w = Column("w", "int", "int(11)")
    assert evolve(T, SCHEMA, AddColumn(T, w, "first")).column_names == ("w", "id", "v")  # type: ignore[union-attr]
    assert evolve(T, SCHEMA, AddColumn(T, w, "after", "id")).column_names == ("id", "w", "v")  # type: ignore[union-attr]
    assert evolve(T, SCHEMA, AddColumn(T, w)).column_names == ("id", "v", "w")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "change",
    [AddColumn(T, V), DropColumn(T, "nope"), RenameColumn(T, "nope", "x"), AddColumn(T, V, "after", "nope")],
)
def test_changes_that_do_not_fit_are_refused(change: object) -> None:
    with pytest.raises(SchemaEvolutionError):
        evolve(T, SCHEMA, change)  # type: ignore[arg-type]


def test_a_change_to_an_unknown_table_is_refused() -> None:
    with pytest.raises(SchemaEvolutionError, match="unknown"):
        evolve(T, None, DropColumn(T, "v"))
    with pytest.raises(SchemaEvolutionError, match="unknown"):
        evolve(U, None, RenameTable(T, U))


def test_a_column_moves_where_the_server_put_it() -> None:
    from binlake.events import (
        AlterColumnDefault,
        AlterColumnType,
        AlterTableCollation,
        Column,
        CreateTable,
        TableId,
    )
    from binlake.schema.history import evolve

    t = TableId("d", "t")
    a, b, c = (Column(n, "int", "int(11)") for n in "abc")
    schema = CreateTable(t, (a, b, c), ("a",), collation="utf8mb4_general_ci")
    wide = Column("c", "bigint", "bigint(20)")
    first = evolve(t, schema, AlterColumnType(t, wide, "first"))
    assert first is not None
    assert first.column_names == ("c", "a", "b")
    after = evolve(t, first, AlterColumnType(t, Column("c", "int", "int(11)"), "after", "b"))
    assert after is not None
    assert after.columns == (a, b, c)
    defaulted = evolve(t, after, AlterColumnDefault(t, Column("b", "int", "int(11)", default="5")))
    assert defaulted is not None
    assert defaulted.column("b").default == "5"
    latin = evolve(t, defaulted, AlterTableCollation(t, "latin1_swedish_ci"))
    assert latin is not None
    assert latin.collation == "latin1_swedish_ci"
