"""The one adapter to python-mysql-replication: binlog events in, binlake ``DataChange`` events out.

Nothing else in binlake touches the library's event classes. Settings that matter, learned the
hard way (ARCHITECTURE.md, "Server and binlog facts"):

- ``enable_logging=False`` always: the library otherwise logs its connection settings, password
  included.
- resume from (file, pos) needs ``resume_stream=True`` and ``is_mariadb=False``; positions must be
  transaction boundaries (watermarks and committed offsets are).
- ``only_tables`` matches a bare table name in any schema, so it goes with ``only_schemas`` and
  the table is checked again here.
- column names need ``binlog_row_metadata=FULL``; ``use_column_name_cache`` would read today's
  schema for yesterday's rows, so it stays off.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlake.config import SourceConfig
from binlake.errors import BinlakeError
from binlake.events import DataChange, TableId
from binlake.offsets import BinlogOffset
from binlake.schema.type_mapping import RowConverter
from binlake.source.connection import connect

log = logging.getLogger(__name__)

#: Server error when the requested binlog file or position is gone (purged) or invalid.
_ER_MASTER_FATAL_READING_BINLOG = 1236


class BinlogPurgedError(BinlakeError):
    """The binlog no longer holds the requested start offset."""

    def __init__(self, message: str, offset: BinlogOffset, oldest: str | None) -> None:
        self.offset = offset
        self.oldest = oldest
        super().__init__(message)


class BinlogReadError(BinlakeError):
    """Reading the binlog failed for another reason."""


def oldest_binlog(conn: pymysql.Connection[Any]) -> str | None:
    """The oldest binlog file the server still has."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        row = cur.fetchone()
    return str(row[0]) if row else None


class BinlogReader:
    """Reads row changes of some tables from ``start`` up to (and including) ``end``.

    Args:
        source: connection settings of the source.
        server_id: this reader's replica id; unique among all readers running at once.
        start: offset to start after (a transaction boundary).
        end: last offset to include; None reads to the current end of the binlog.
        tables: only changes of these tables are returned.
        converters: normalises row images per table (see ``schema.type_mapping``).
    """

    def __init__(
        self,
        source: SourceConfig,
        server_id: int,
        start: BinlogOffset,
        end: BinlogOffset | None,
        tables: set[TableId],
        converters: Callable[[TableId], RowConverter],
    ) -> None:
        self.source = source
        self.server_id = server_id
        self.start = start
        self.end = end
        self.tables = tables
        self.converters = converters

    def changes(self) -> Iterator[DataChange]:
        """Row changes in binlog order; stops at ``end`` (or the binlog's current end)."""
        stream = BinLogStreamReader(
            connection_settings={
                "host": self.source.hostname,
                "port": self.source.port,
                "user": self.source.username,
                "password": self.source.password.get_secret_value(),
                "connect_timeout": self.source.connect_timeout_s,
            },
            server_id=self.server_id,
            log_file=self.start.file,
            log_pos=self.start.pos,
            resume_stream=True,
            blocking=False,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
            only_schemas=sorted({t.database for t in self.tables}),
            only_tables=sorted({t.table for t in self.tables}),
            enable_logging=False,
        )
        try:
            yield from self._read(stream)
        except pymysql.err.OperationalError as e:
            raise self._error(e) from None
        finally:
            stream.close()

    def _read(self, stream: BinLogStreamReader) -> Iterator[DataChange]:
        for event in stream:
            offset = BinlogOffset(stream.log_file, stream.log_pos)
            if self.end is not None and offset > self.end:
                return
            table = TableId(event.schema, event.table)
            if table not in self.tables:
                continue
            yield from self._changes(event, table, offset)

    def _changes(self, event: Any, table: TableId, offset: BinlogOffset) -> Iterator[DataChange]:
        convert = self.converters(table)
        names = convert.table.column_names
        ts = int(event.timestamp)

        def image(values: dict[str, Any], none_sources: dict[str, str]) -> dict[str, Any]:
            return dict(zip(names, convert.binlog_row(values, none_sources), strict=True))

        for row in event.rows:
            if isinstance(event, WriteRowsEvent):
                yield DataChange.insert(table, image(row["values"], row["none_sources"]), offset, ts)
            elif isinstance(event, UpdateRowsEvent):
                before = image(row["before_values"], row["before_none_sources"])
                after = image(row["after_values"], row["after_none_sources"])
                yield DataChange.update(table, before, after, offset, ts)
            else:
                yield DataChange.delete(table, image(row["values"], row["none_sources"]), offset, ts)

    def _error(self, error: pymysql.err.OperationalError) -> BinlakeError:
        code = error.args[0] if error.args else None
        reason = str(error.args[1]) if len(error.args) > 1 else str(error)
        if code == _ER_MASTER_FATAL_READING_BINLOG:
            oldest = None
            with (
                contextlib.suppress(BinlakeError, pymysql.err.MySQLError),
                contextlib.closing(connect(self.source)) as conn,
            ):
                oldest = oldest_binlog(conn)
            return BinlogPurgedError(
                f"Could not read the binlog from {self.start}: the server no longer has it "
                f"({reason}); the oldest binlog file there is {oldest or 'unknown'}. Fix: read "
                "again from a newer offset (a snapshot chunk is simply read again; a stream needs a "
                "new snapshot with `startup_mode: initial` or a backfill), and keep binlogs longer "
                "(`binlog_expire_logs_seconds`).",
                self.start,
                oldest,
            )
        return BinlogReadError(f"Could not read the binlog from {self.start}: {reason} (error {code}).")
