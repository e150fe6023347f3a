"""What the stream's start-up asks the source, read in one session (``stream/preflight.py``).

The start-up's checks (which tables, their cascading foreign keys, where the binlog is, which
server this is) are answered from one value, so none of them opens a connection of its own.
Only reading the binlog itself (a file's creation time, where a GTID set ends) takes its
replication connection.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from binlake.config import SourceConfig
from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.source.binlog.gtid_positions import server_name
from binlake.source.binlog.scan import binary_logs
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import ServerVersion, connect, server_version
from binlake.source.server.discovery import captured_tables, discover
from binlake.source.server.foreign_keys import CascadingKey, cascading_keys


@dataclass(frozen=True)
class ServerFacts:
    """The source as the stream found it at its start."""

    version: ServerVersion
    server: str
    """The server's identity among replicas (``gtid_positions.server_name``)."""
    binary_logs: list[tuple[str, int]]
    """The binlog files the server holds, oldest first, with their sizes."""
    head: BinlogOffset
    """The binlog's end: after the last committed transaction, with the server's GTID set."""
    tables: list[CreateTable]
    """The captured tables (``source.tables``, less ``source.tables_exclude``), as they are now."""
    cascading: list[CascadingKey]
    """The captured tables' foreign keys that change child rows the binlog never shows."""

    @property
    def files(self) -> list[str]:
        return [name for name, _ in self.binary_logs]


def server_facts(source: SourceConfig) -> ServerFacts:
    """Ask the source, in one session, everything the stream's start-up checks."""
    with contextlib.closing(connect(source)) as conn:
        version = server_version(conn)
        tables = discover(conn, captured_tables(conn, source))
        return ServerFacts(
            version=version,
            server=server_name(conn, version),
            binary_logs=binary_logs(conn),
            head=current_offset(conn, version),
            tables=tables,
            cascading=cascading_keys(conn, [s.table for s in tables]),
        )
