"""What an ADD COLUMN gives the rows a table already holds (``schema.defaults``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from binlake.events import Column, StatementClock
from binlake.schema.defaults import Default, existing_rows_value

AT = StatementClock(1_700_000_000)  # the statement's time: no fraction, no time zone in its event
# what MariaDB writes for a statement run in `SET time_zone = '+05:30'` at .417369 s past the second
LOCAL = StatementClock(1_700_000_000, 417_369, dt.datetime(2023, 11, 15, 3, 43, 20))


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
    ("column", "value"),
    [
        (_column("timestamp", default="current_timestamp()"), dt.datetime(2023, 11, 14, 22, 13, 20)),
        (
            _column("timestamp", default="current_timestamp(3)", fsp=3),
            dt.datetime(2023, 11, 14, 22, 13, 20, 417000),
        ),
        (_column("datetime", default="current_timestamp()"), dt.datetime(2023, 11, 15, 3, 43, 20)),
        (_column("datetime", default="now(6)", fsp=6), dt.datetime(2023, 11, 15, 3, 43, 20, 417369)),
        # the default's precision truncates (the server's NOW(n)); a wider column keeps it
        (
            _column("datetime", default="current_timestamp(2)", fsp=6),
            dt.datetime(2023, 11, 15, 3, 43, 20, 410000),
        ),
        (_column("datetime", default="localtimestamp", fsp=0), dt.datetime(2023, 11, 15, 3, 43, 20)),
        (_column("date", default="curdate()"), dt.date(2023, 11, 15)),
        (_column("date", default="(current_date)"), dt.date(2023, 11, 15)),
    ],
)
def test_the_statements_own_time(column: Column, value: Any) -> None:
    assert existing_rows_value(column, LOCAL) == Default(value)


def test_a_narrower_column_or_no_fraction_is_the_servers_alone() -> None:
    # rounding vs truncating into a narrower column follows the session's sql_mode and the server
    assert existing_rows_value(_column("datetime", default="current_timestamp(6)", fsp=3), LOCAL) is None
    no_fraction = StatementClock(LOCAL.epoch, None, LOCAL.local)
    assert existing_rows_value(_column("datetime", default="now(3)", fsp=3), no_fraction) is None
    assert existing_rows_value(_column("datetime", default="now()"), no_fraction) == Default(LOCAL.local)


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
