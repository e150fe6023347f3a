"""The current time of a statement, from its query event's status variables: MySQL's
``Q_MICROSECONDS`` and MariaDB's ``Q_HRNOW`` (the fraction), ``Q_TIME_ZONE_CODE`` (the session's
time zone). MySQL's events are built here from the documented format (no MySQL server on CI);
MariaDB's come from the private server in ``tests/spark/test_schema_evolution.py``."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest
from pymysql.protocol import MysqlPacket
from pymysqlreplication.event import QueryEvent
from pymysqlreplication.packet import BinLogPacketWrapper

from binlake.source.binlog.scan import clock_of

Q_FLAGS2_CODE, Q_TIME_ZONE_CODE, Q_MICROSECONDS, Q_HRNOW = 0x00, 0x05, 0x0D, 0x80
QUERY_EVENT = 0x02


def _status(key: int, value: bytes) -> bytes:
    return bytes([key]) + value


def _query_event(
    status_vars: bytes, query: bytes = b"ALTER TABLE t ADD COLUMN c DATETIME(6) DEFAULT NOW(6)"
) -> QueryEvent:
    """A query event as the server sends it in a binlog dump (OK byte, header, post-header,
    status variables, schema, NUL, statement), without a checksum."""
    schema = b"shop"
    post_header = struct.pack("<IIBHH", 7, 0, len(schema), 0, len(status_vars))
    body = post_header + status_vars + schema + b"\x00" + query
    header = struct.pack("<IBIIIH", 1_700_000_000, QUERY_EVENT, 1, 19 + len(body), 4242, 0)
    wrapper = BinLogPacketWrapper(
        MysqlPacket(b"\x00" + header + body, "utf8"),
        {},
        SimpleNamespace(charset="utf8mb4", _get_dbms=lambda: "mysql"),
        (8, 0, 36),
        False,  # use_checksum
        frozenset({QueryEvent}),
        None, None, None, None, False, False, False, False,
        False,  # enable_logging
    )  # fmt: skip
    event = wrapper.event
    assert isinstance(event, QueryEvent)
    return event


def _micros(value: int) -> bytes:
    return struct.pack("<I", value)[:3]


@pytest.mark.parametrize(
    ("status_vars", "clock"),
    [
        # MySQL: SET time_zone = '+05:30'; … NOW(6) at .417369
        (
            _status(Q_FLAGS2_CODE, b"\x00\x00\x00\x00")
            + _status(Q_TIME_ZONE_CODE, b"\x06+05:30")
            + _status(Q_MICROSECONDS, _micros(417_369)),
            (417_369, "+05:30"),
        ),
        # MySQL with a named zone, whose NOW() read no fraction
        (_status(Q_TIME_ZONE_CODE, b"\x0dEurope/Berlin"), (None, "Europe/Berlin")),
        # MariaDB's high-resolution time
        (_status(Q_HRNOW, _micros(999_999)) + _status(Q_TIME_ZONE_CODE, b"\x06SYSTEM"), (999_999, "SYSTEM")),
        # a statement that read no time at all
        (_status(Q_FLAGS2_CODE, b"\x00\x00\x00\x00"), (None, None)),
    ],
    ids=["mysql-offset-micros", "mysql-named-zone", "mariadb-hrnow", "no-time-read"],
)
def test_the_statements_clock_from_its_status_variables(
    status_vars: bytes, clock: tuple[int | None, str | None]
) -> None:
    event = _query_event(status_vars)
    assert event.query.startswith("ALTER TABLE t")  # the event was read whole, past its status vars
    assert clock_of(event) == clock
