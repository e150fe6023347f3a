"""Which column type changes rewrite the values the server held (``schema/type_changes.py``)."""

from __future__ import annotations

import pytest

from binlake.events import Column
from binlake.schema.type_changes import STRICT_MODES, changed_values, strict_statement


def col(column_type: str, **kw: object) -> Column:
    data_type = column_type.split("(")[0].split()[0]
    return Column("c", data_type, column_type, **kw)


ROUNDED = [  # even a strict session converts these
    (col("datetime(3)", fsp=3), col("datetime", fsp=0)),
    (col("time(6)", fsp=6), col("time(2)", fsp=2)),
    (col("decimal(10,2)", precision=10, scale=2), col("decimal(12,1)", precision=12, scale=1)),
    (col("double"), col("float")),
    (col("varchar(10)", length=10), col("char(10)", length=10)),
    (col("decimal(10,2)", precision=10, scale=2), col("int")),
    (col("bigint"), col("double")),
    (col("datetime"), col("date")),
    (col("datetime"), col("time")),
    (col("int", generated=True), col("int", generated=True)),  # a new expression, perhaps
    (col("int"), col("int", auto_increment=True)),
]
CUT = [  # a strict session fails instead
    (col("varchar(20)", length=20), col("varchar(3)", length=3)),
    (col("text"), col("varchar(100)", length=100)),
    (col("int"), col("tinyint")),
    (col("int"), col("int unsigned", unsigned=True)),
    (col("int unsigned", unsigned=True), col("int")),
    (col("decimal(10,2)", precision=10, scale=2), col("decimal(6,2)", precision=6, scale=2)),
    (col("int"), col("decimal(5,0)", precision=5, scale=0)),
    (col("enum('a','b')", values=("a", "b")), col("enum('a')", values=("a",))),
    (col("int"), col("int", nullable=False)),
    (col("varchar(10)", length=10, charset="utf8mb4"), col("varchar(10)", length=10, charset="latin1")),
    (col("varchar(10)", length=10), col("int")),
    (col("varchar(30)", length=30), col("datetime")),
]
KEPT = [  # every value reads the same
    (col("int"), col("bigint")),
    (col("int unsigned", unsigned=True), col("bigint")),
    (col("smallint"), col("int unsigned", unsigned=False)),
    (col("varchar(10)", length=10), col("varchar(20)", length=20)),
    (col("varchar(100)", length=100), col("text")),
    (col("char(5)", length=5), col("varchar(5)", length=5)),
    (col("datetime", fsp=0), col("datetime(6)", fsp=6)),
    (col("decimal(10,2)", precision=10, scale=2), col("decimal(14,4)", precision=14, scale=4)),
    (col("int"), col("decimal(12,0)", precision=12, scale=0)),
    (col("int"), col("double")),
    (col("float"), col("double")),
    (col("date"), col("datetime")),
    (col("enum('a')", values=("a",)), col("enum('a','b')", values=("a", "b"))),
    (col("int", nullable=False), col("int")),
    (col("int"), col("varchar(20)", length=20)),  # rendered as text: the sink's behaviour decides
    (col("varchar(10)", length=10, charset="utf8mb3"), col("varchar(10)", length=10, charset="utf8mb4")),
    (col("datetime"), col("timestamp")),
]


@pytest.mark.parametrize(("old", "new"), ROUNDED)
def test_rounding_changes_values_in_any_session(old: Column, new: Column) -> None:
    assert changed_values(old, new, strict=True) is not None
    assert changed_values(old, new, strict=False) is not None


@pytest.mark.parametrize(("old", "new"), CUT)
def test_cutting_changes_values_only_where_the_session_lets_it(old: Column, new: Column) -> None:
    assert changed_values(old, new, strict=True) is None  # the statement failed on a value that did not fit
    assert changed_values(old, new, strict=False) is not None


@pytest.mark.parametrize(("old", "new"), KEPT)
def test_widening_keeps_every_value(old: Column, new: Column) -> None:
    assert changed_values(old, new, strict=False) is None


def test_a_statement_is_strict_in_a_strict_session_without_alter_ignore() -> None:
    strict = 1 << 21  # STRICT_TRANS_TABLES, as the server writes Q_SQL_MODE_CODE
    assert strict & STRICT_MODES
    assert strict_statement(strict, "ALTER TABLE t MODIFY c INT")
    assert strict_statement(1 << 22, "alter table t modify c int")  # STRICT_ALL_TABLES
    assert not strict_statement(strict, "ALTER IGNORE TABLE t MODIFY c INT")
    assert not strict_statement(strict, "/* gh-ost */ alter online ignore table t modify c int")
    assert not strict_statement(0, "ALTER TABLE t MODIFY c INT")
    assert not strict_statement(None, "ALTER TABLE t MODIFY c INT")  # not written: assume it converted


def test_a_widening_keeps_the_family_and_every_value() -> None:
    from binlake.schema.type_changes import widened

    assert widened(col("int"), col("bigint"))
    assert widened(col("varchar(10)", length=10), col("varchar(40)", length=40))
    assert not widened(col("int"), col("varchar(20)", length=20))  # another family: expressions change
    assert not widened(col("bigint"), col("int"))  # may cut, in a session that lets it
    assert not widened(col("datetime(3)", fsp=3), col("datetime", fsp=0))
