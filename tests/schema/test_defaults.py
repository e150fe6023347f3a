"""What an ADD COLUMN gives the rows a table already holds (``schema.defaults``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from binlake.events import Column
from binlake.schema.defaults import Default, existing_rows_value

AT = 1_700_000_000  # the statement's time


def _column(data_type: str, **fields: Any) -> Column:
    return Column("c", data_type, fields.pop("column_type", data_type), **fields)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        (_column("varchar", default="'basic'", collation="utf8mb4_general_ci"), "basic"),
        (_column("varchar", default="'it''s'", collation="utf8mb4_general_ci"), "it's"),
        (_column("int"), None),  # nullable without a default: NULL, nothing to fill
        (_column("int", default="NULL"), None),
        (_column("int", nullable=False), 0),  # NOT NULL without a default: the type's implicit one
        (_column("bigint", nullable=False, unsigned=True), Decimal(0)),
        (_column("decimal", nullable=False, precision=6, scale=2), Decimal("0.00")),
        (_column("varchar", nullable=False, collation="utf8mb4_general_ci"), ""),
        (_column("varbinary", nullable=False), b""),
        (_column("enum", nullable=False, values=("low", "high"), collation="x"), "low"),
        (_column("decimal", default="1.50", precision=6, scale=2), Decimal("1.50")),
        (_column("timestamp", nullable=False, default="now()"), dt.datetime(2023, 11, 14, 22, 13, 20)),
    ],
)
def test_values_binlake_knows(column: Column, value: Any) -> None:
    assert existing_rows_value(column, AT) == Default(value)


@pytest.mark.parametrize(
    "column",
    [
        _column("int", auto_increment=True, nullable=False),
        _column("int", generated=True),
        _column("datetime", default="current_timestamp()"),  # the session's time zone
        _column("timestamp", default="current_timestamp(6)", fsp=6),  # a fraction the event lacks
        _column("varchar", default="uuid()", collation="utf8mb4_general_ci"),
        _column("date", nullable=False),  # a zero date
    ],
)
def test_values_only_the_server_knew(column: Column) -> None:
    assert existing_rows_value(column, AT) is None
