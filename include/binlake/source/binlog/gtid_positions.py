"""GTIDs and binlog positions: what a position stands for on any server, and where that is on another.

A binlog file and position mean something only on the server that wrote them: after a failover to
a replica (other files, other positions) or a ``RESET MASTER`` (the files start again), the same
numbers point at unrelated events. A GTID set does not: it names transactions, wherever they are.
So the stream keeps, with every offset it commits, the GTID set of everything up to it
(``gtid_at``), and the identity of the binlog it read (``binlog_identity``); on another binlog
it resumes by that set (``position_after``), or stops when there is none.

- MariaDB: ``BINLOG_GTID_POS(file, pos)`` gives the GTID position of an offset; a dump started
  from a GTID position (``slave_connect_state``) begins at the first transaction after it.
- MySQL: the set at an offset is the file's ``Previous_gtids`` plus the GTIDs of its transactions
  up to the offset (read from the binlog, only event headers); a dump by GTID set
  (``COM_BINLOG_DUMP_GTID``) begins at the first transaction not in it.
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    MariadbGtidEvent,
    PreviousGtidsEvent,
    QueryEvent,
    XidEvent,
)

from binlake.config import SourceConfig
from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset, GtidSet
from binlake.source.binlog.scan import open_stream, transactions
from binlake.source.server.connection import ServerVersion, connect, server_version

#: The server's error when a dump asks for a GTID its binlog does not hold.
_ER_MASTER_FATAL_READING_BINLOG = 1236


class GtidPositionError(BinlakeError):
    """The server's binlog cannot say where a GTID set ends."""


@dataclass(frozen=True)
class BinlogIdentity:
    """Which binlog an offset belongs to: the server that wrote it and its file's creation time."""

    server: str
    """``mariadb:<server_id>`` or ``mysql:<server_uuid>``."""
    file: str
    created: int
    """The timestamp of the file's format description event (a file made anew has another)."""

    def to_dict(self) -> dict[str, Any]:
        return {"server": self.server, "file": self.file, "created": self.created}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BinlogIdentity:
        return cls(str(data["server"]), str(data["file"]), int(data["created"]))


def server_name(conn: pymysql.Connection[Any], version: ServerVersion) -> str:
    """The server's identity among replicas: MariaDB's ``server_id``, MySQL's ``server_uuid``."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@server_id" if version.flavor == "mariadb" else "SELECT @@server_uuid")
        return f"{version.flavor}:{cur.fetchone()[0]}"


def file_created(source: SourceConfig, server_id: int, file: str) -> int | None:
    """The creation time of a binlog file (its format description event), None if it is gone."""
    stream = open_stream(source, server_id, BinlogOffset(file, 4), only_events=[FormatDescriptionEvent])
    try:
        for event in stream:
            return int(event.timestamp)
        return None
    except pymysql.err.OperationalError:
        return None
    finally:
        stream.close()


def binlog_identity(
    source: SourceConfig, server_id: int, file: str, server: str | None = None
) -> BinlogIdentity | None:
    """The identity of ``file`` on the source now (None: the server has no such file; ``server``:
    its ``server_name`` when the caller knows it)."""
    name = server
    if name is None:
        with contextlib.closing(connect(source)) as conn:
            name = server_name(conn, server_version(conn))
    created = file_created(source, server_id, file)
    return None if created is None else BinlogIdentity(name, file, created)


class GtidTracker:
    """The GTID set of everything up to an offset, kept up to date as the stream moves on."""

    def __init__(self, source: SourceConfig, server_id: int, flavor: str) -> None:
        self.source = source
        self.server_id = server_id
        self.flavor = flavor
        self._known: tuple[BinlogOffset, GtidSet] | None = None

    def gtid_at(self, offset: BinlogOffset) -> str | None:
        """The GTID set at ``offset`` (None: the server writes no GTIDs)."""
        if self.flavor == "mariadb":
            with contextlib.closing(connect(self.source)) as conn, conn.cursor() as cur:
                cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (offset.file, offset.pos))
                row = cur.fetchone()
            return str(row[0]) if row and row[0] else None
        known = self._known
        if known is not None and known[0] <= offset:
            found = known[1].copy()
            start = known[0]
        else:
            previous = _previous_gtids(self.source, self.server_id, offset.file)
            if previous is None:
                return None
            found, start = previous, BinlogOffset(offset.file, 4)
        if offset > start:
            for boundary in transactions(self.source, self.server_id, start, offset):
                if boundary.gtid is not None:
                    found.add(boundary.gtid)
        self._known = (offset, found)
        text = str(found)
        return text or None


def _previous_gtids(source: SourceConfig, server_id: int, file: str) -> GtidSet | None:
    """MySQL's ``Previous_gtids`` of a file: every GTID before it (None: no GTIDs are written)."""
    stream = open_stream(
        source, server_id, BinlogOffset(file, 4), only_events=[PreviousGtidsEvent, QueryEvent, XidEvent]
    )
    try:
        for event in stream:
            if isinstance(event, PreviousGtidsEvent):
                return parse_previous_gtids(bytes(event.packet.packet.get_all_data()[20:]))
            return None  # the first transaction came first: no Previous_gtids event
        return None
    finally:
        stream.close()


def parse_previous_gtids(body: bytes) -> GtidSet | None:
    """A Previous_gtids_log_event's body (untagged format: source count, then per source its
    uuid, interval count and [start, end) intervals); None for the tagged format of MySQL 8.3+."""
    count = struct.unpack_from("<Q", body, 0)[0]
    if count >> 56:  # the tagged format marks its first byte
        return None
    found = GtidSet()
    pos = 8
    for _ in range(count):
        uuid = body[pos : pos + 16].hex()
        uuid = f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}"
        intervals = struct.unpack_from("<Q", body, pos + 16)[0]
        pos += 24
        for _ in range(intervals):
            start, end = struct.unpack_from("<QQ", body, pos)
            pos += 16
            found._add_interval(uuid, start, end - 1)  # stored as [start, end)
    return found


def with_unknown_sources(wanted: GtidSet, server: GtidSet) -> GtidSet:
    """``wanted`` plus the server's own state for the domains or sources ``wanted`` lacks."""
    merged = wanted.copy()
    for domain, last in server.mariadb.items():
        merged.mariadb.setdefault(domain, last)
    for uuid, intervals in server.mysql.items():
        if uuid not in merged.mysql:
            merged.mysql[uuid] = [list(i) for i in intervals]
    return merged


def position_after(
    source: SourceConfig, server_id: int, gtid: str, flavor: str, head: BinlogOffset
) -> BinlogOffset:
    """Where, in the source's binlog, the transactions not in ``gtid`` begin: a transaction
    boundary to stream from (``head``: the binlog's end with the server's GTID set, read before).

    Raises:
        GtidPositionError: the binlog does not hold the set (purged, or another history).
    """
    # Transactions of domains (MariaDB) or sources (MySQL) the set does not know were never the
    # stream's: written on the new server alone (its own user accounts, say). Asked as they are,
    # the server would send them from its binlog's start; taken as applied, they are skipped.
    gtid = str(with_unknown_sources(GtidSet.parse(gtid), GtidSet.parse(head.gtid or "")))
    stream = open_stream(
        source,
        server_id,
        None,
        is_mariadb=flavor == "mariadb",
        auto_position=gtid,
        only_events=[MariadbGtidEvent, GtidEvent, XidEvent, QueryEvent],
        only_tables=[""],
        only_schemas=[""],
    )
    last: BinlogOffset | None = None
    try:
        for event in stream:
            if isinstance(event, MariadbGtidEvent | GtidEvent):
                # The first transaction after the set: it begins where its GTID event does.
                return BinlogOffset(stream.log_file, stream.log_pos - event.packet.event_size)
            last = BinlogOffset(stream.log_file, stream.log_pos)
    except pymysql.err.OperationalError as e:
        code = e.args[0] if e.args else None
        reason = str(e.args[1]) if len(e.args) > 1 else str(e)
        if code == _ER_MASTER_FATAL_READING_BINLOG:
            raise GtidPositionError(
                f"The source's binlog does not hold the transactions after GTID `{gtid}` ({reason})"
            ) from None
        raise
    finally:
        stream.close()
    if last is None:  # nothing read: the end read before (a transaction since would have been read)
        return BinlogOffset(head.file, head.pos)
    return last  # nothing after the set yet: the binlog's end when read
