"""Which transaction the rows the reader yields belong to (``BinlogReader.gtid``), on MySQL's events
built here from the documented format (no MySQL server on CI): a GTID_LOG_EVENT's `uuid:number`,
none for an anonymous transaction after it, and an XA transaction's rows under its commit's GTID.
MariaDB's are checked against the private server's binlog in ``tests/spark/test_changelog.py``."""

from __future__ import annotations

import struct
import uuid
from types import SimpleNamespace
from typing import Any

from pymysql.protocol import MysqlPacket
from pymysqlreplication.event import GtidEvent, QueryEvent, XidEvent
from pymysqlreplication.packet import BinLogPacketWrapper

from binlake.config import SourceConfig
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from tests.source.binlog.test_xa import _event, _prepare_event, _Reader, _RowsEvent, _Stream

GTID_LOG_EVENT = 0x21
SOURCE = uuid.UUID("3e11fa47-71ca-11e1-9e33-c80aa9429562")


def _gtid_event(number: int) -> GtidEvent:
    """A GTID_LOG_EVENT as MySQL 8.0 writes it: commit flag, source UUID, transaction number,
    logical clock type and fields (the commit timestamps after them are not read)."""
    body = struct.pack("<B16sQBQQ", 1, SOURCE.bytes, number, 2, 0, 1) + b"\x00" * 14
    header = struct.pack("<IBIIIH", 1_700_000_000, GTID_LOG_EVENT, 1, 19 + len(body), 4242, 0)
    wrapper = BinLogPacketWrapper(
        MysqlPacket(b"\x00" + header + body, "utf8"),
        {},
        SimpleNamespace(charset="utf8mb4", _get_dbms=lambda: "mysql"),
        (8, 0, 36),
        False,  # use_checksum
        frozenset({GtidEvent}),
        None, None, None, None, False, False, False, False,
        False,  # enable_logging
    )  # fmt: skip
    event = wrapper.event
    assert isinstance(event, GtidEvent)
    return event


def _gtids(events: list[Any]) -> list[tuple[Any, str | None]]:
    source = SourceConfig(hostname="h", username="u", tables=["d\\..*"])
    reader = _Reader(source, 1, BinlogOffset("binlog.000001", 4), None, {TableId("d", "t")}, lambda _: None)  # type: ignore[arg-type,return-value]
    return [(e.images[0][0], reader.gtid) for e in reader._read(_Stream(events))]  # type: ignore[arg-type]


def test_rows_take_their_transactions_gtid() -> None:
    found = _gtids([
        _gtid_event(41), _event(QueryEvent, query="BEGIN", schema=b"d"), _RowsEvent((1,)), _RowsEvent((2,)),
        _event(XidEvent),
        _event(QueryEvent, query="BEGIN", schema=b"d"), _RowsEvent((3,)), _event(XidEvent),  # anonymous
        _gtid_event(42), _event(QueryEvent, query="XA START X'6131',X'',1", schema=b"d"), _RowsEvent((4,)),
        _event(QueryEvent, query="XA END X'6131',X'',1", schema=b"d"), _prepare_event(b"a1"),
        _gtid_event(43), _event(QueryEvent, query="XA COMMIT X'6131',X'',1", schema=b"d"),
    ])  # fmt: skip
    uid = str(SOURCE)
    assert found == [(1, f"{uid}:41"), (2, f"{uid}:41"), (3, None), (4, f"{uid}:43")]
