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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlake.config import SourceConfig
from binlake.errors import BinlakeError
from binlake.events import DataChange, TableId
from binlake.offsets import BinlogOffset
from binlake.source.connection import connect

if TYPE_CHECKING:  # imported when used: the stream's planning side imports this module, not the
    # decoders (numpy, pyarrow, pyiceberg's types: 0.5 s at each query's start)
    from binlake.schema.type_mapping import RowConverter
    from binlake.source.column_decoder import ColumnDecoder, RawRows
    from binlake.source.row_decoder import RowDecoder

log = logging.getLogger(__name__)

#: Server error when the requested binlog file or position is gone (purged) or invalid.
_ER_MASTER_FATAL_READING_BINLOG = 1236


def _row_data(event: Any) -> bytes:
    """What is left of a rows event after its header: the row images."""
    data: bytes = event.packet.read(event.event_size - event.packet.read_bytes)
    return data


def _key_at(convert: RowConverter) -> list[int]:
    """Positions of the table's primary key columns (what lean images hold)."""
    return [convert.table.column_names.index(k) for k in convert.table.primary_key]


class BinlogPurgedError(BinlakeError):
    """The binlog no longer holds the requested start offset."""

    def __init__(self, message: str, offset: BinlogOffset, oldest: str | None) -> None:
        self.offset = offset
        self.oldest = oldest
        super().__init__(message)


class BinlogReadError(BinlakeError):
    """Reading the binlog failed for another reason."""


class SchemaChangedError(BinlakeError):
    """Rows in the binlog were written with other columns than the schema binlake holds."""


#: MariaDB GTID event flag: the transaction is a single statement (DDL) without BEGIN/COMMIT.
_FL_STANDALONE = 1

RowOp = Literal["insert", "update", "delete"]


class EventRows(NamedTuple):
    """The row images of one rows event: for updates, before and after images alternate (in
    columnar mode, ``RawRows`` where the column decoder takes the event)."""

    table: TableId
    op: RowOp
    images: list[Any] | RawRows
    offset: BinlogOffset
    timestamp: int


class RowImage(NamedTuple):
    """One row change, lean: images are normalised tuples in the table's column order.

    ``idx`` orders the rows of one rows event (they share its offset). A named tuple: one is
    made per row change, and a frozen dataclass costs several times more to create.
    """

    table: TableId
    op: RowOp
    before: tuple[Any, ...] | None
    after: tuple[Any, ...] | None
    offset: BinlogOffset
    timestamp: int
    idx: int


@dataclass(frozen=True)
class Boundary:
    """The end of a transaction (or standalone statement): a position a reader may start at."""

    offset: BinlogOffset
    timestamp: int
    """Event time (epoch seconds) of the transaction's last event."""
    gtid: str | None = None
    """The transaction's GTID, where the server writes them."""
    statement: str | None = None
    """The text of a standalone statement (DDL, GRANT …) that ends here; never log it: it may hold
    a password (``CREATE USER … IDENTIFIED BY``)."""
    database: str = ""
    """The statement's default database (unqualified names in it belong there)."""


def oldest_binlog(conn: pymysql.Connection[Any]) -> str | None:
    """The oldest binlog file the server still has."""
    files = binary_logs(conn)
    return files[0][0] if files else None


def binary_logs(conn: pymysql.Connection[Any]) -> list[tuple[str, int]]:
    """The server's binlog files and their sizes in bytes, oldest first."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        rows = cur.fetchall()
    return [(str(row[0]), int(row[1])) for row in rows]


def _open(source: SourceConfig, server_id: int, start: BinlogOffset, **options: Any) -> BinLogStreamReader:
    return BinLogStreamReader(
        connection_settings={
            "host": source.hostname,
            "port": source.port,
            "user": source.username,
            "password": source.password.get_secret_value(),
            "connect_timeout": source.connect_timeout_s,
        },
        server_id=server_id,
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=False,
        enable_logging=False,
        **options,
    )


def transactions(
    source: SourceConfig, server_id: int, start: BinlogOffset, end: BinlogOffset | None = None
) -> Iterator[Boundary]:
    """Every transaction boundary after ``start`` up to ``end`` (or the binlog's current end).

    Row events are skipped undecoded (the library parses only the event header), so this runs at
    transport speed: it is how the stream cuts a range into segments that readers can start at.
    """
    # The library parses every table map (column types, names, charsets) unless its table is
    # filtered out; a name no table has makes each one stop after its header (measured: table maps
    # were most of the scan's time on small transactions).
    stream = _open(
        source,
        server_id,
        start,
        only_events=[XidEvent, QueryEvent, GtidEvent, MariadbGtidEvent],
        only_tables=[""],
        only_schemas=[""],
    )
    in_transaction = False
    gtid: str | None = None
    try:
        for event in stream:
            offset = BinlogOffset(stream.log_file, stream.log_pos)
            if end is not None and offset > end:
                return
            if isinstance(event, MariadbGtidEvent):
                in_transaction = not event.flags & _FL_STANDALONE
                gtid = event.gtid
                continue
            if isinstance(event, GtidEvent):
                gtid = event.gtid
                continue
            if isinstance(event, QueryEvent):
                keyword = event.query.strip().upper()
                if keyword == "BEGIN":
                    in_transaction = True
                    continue
                if in_transaction and keyword not in ("COMMIT", "ROLLBACK"):
                    continue  # e.g. SAVEPOINT inside a transaction
            standalone = isinstance(event, QueryEvent) and not in_transaction
            in_transaction = False
            statement = _text(event.query) if standalone else None
            database = _text(event.schema) if standalone else ""
            yield Boundary(offset, int(event.timestamp), gtid, statement, database)
            gtid = None
    except pymysql.err.OperationalError as e:
        raise _read_error(source, start, e) from None
    finally:
        stream.close()


class BinlogReader:
    """Reads row changes of some tables from ``start`` up to (and including) ``end``.

    Args:
        source: connection settings of the source.
        server_id: this reader's replica id; unique among all readers running at once.
        start: offset to start after (a transaction boundary).
        end: last offset to include; None reads to the current end of the binlog.
        tables: only changes of these tables are returned.
        converters: normalises row images per table (see ``schema.type_mapping``).
        lean: decode only the key of before images and deletes of tables with a primary key (the
            stream's mode: nothing else of them is used); other columns of those images are None.
        columnar: hand events of tables the column decoder takes over undecoded (``RawRows``),
            for ``stream.records`` to decode a block at a time (``events`` only).
    """

    def __init__(
        self,
        source: SourceConfig,
        server_id: int,
        start: BinlogOffset,
        end: BinlogOffset | None,
        tables: set[TableId],
        converters: Callable[[TableId], RowConverter],
        lean: bool = False,
        columnar: bool = False,
    ) -> None:
        self.source = source
        self.lean = lean
        self.columnar = columnar
        self._decoders: dict[TableId, RowDecoder] = {}
        self._column_decoders: dict[TableId, ColumnDecoder] = {}
        self.server_id = server_id
        self.start = start
        self.end = end
        self.tables = tables
        self.converters = converters
        self.last_offset = start
        self.last_timestamp = 0

    def changes(self) -> Iterator[DataChange]:
        """Row changes in binlog order; stops at ``end`` (or the binlog's current end)."""
        names: dict[TableId, tuple[str, ...]] = {}
        for row in self.rows():
            columns = names.get(row.table)
            if columns is None:
                columns = names[row.table] = self.converters(row.table).table.column_names
            before = dict(zip(columns, row.before, strict=True)) if row.before is not None else None
            after = dict(zip(columns, row.after, strict=True)) if row.after is not None else None
            yield DataChange(row.table, row.op, before, after, row.offset, row.timestamp)

    def rows(self) -> Iterator[RowImage]:
        """Row changes in binlog order as normalised tuples (no per-row dicts).

        ``last_offset`` and ``last_timestamp`` follow every transaction end read, also of other
        tables, so a caller knows how far the reader got and how old the newest event was.
        """
        for event in self.events():
            table, op, images, offset, ts = event
            if not isinstance(images, list):
                raise TypeError("BinlogReader.rows reads row images: a columnar reader gives undecoded rows")
            if op == "update":
                for i in range(0, len(images), 2):
                    yield RowImage(table, op, images[i], images[i + 1], offset, ts, i // 2)
            elif op == "insert":
                for i, image in enumerate(images):
                    yield RowImage(table, op, None, image, offset, ts, i)
            else:
                for i, image in enumerate(images):
                    yield RowImage(table, op, image, None, offset, ts, i)

    def events(self) -> Iterator[EventRows]:
        """The rows events of the tables in binlog order, each with all its row images (the
        stream's path: its consumer handles an event's rows at once)."""
        stream = _open(
            self.source,
            self.server_id,
            self.start,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent],
            only_schemas=sorted({t.database for t in self.tables}),
            only_tables=sorted({t.table for t in self.tables}),
        )
        try:
            yield from self._read(stream)
        except pymysql.err.OperationalError as e:
            raise _read_error(self.source, self.start, e) from None
        finally:
            stream.close()

    def _read(self, stream: BinLogStreamReader) -> Iterator[EventRows]:
        for event in stream:
            offset = BinlogOffset(stream.log_file, stream.log_pos)
            if self.end is not None and offset > self.end:
                return
            self.last_offset, self.last_timestamp = offset, int(event.timestamp)
            if isinstance(event, XidEvent | QueryEvent):
                continue
            table = TableId(event.schema, event.table)
            if table not in self.tables:
                continue
            yield self._event_rows(event, table, offset)

    def _event_rows(self, event: Any, table: TableId, offset: BinlogOffset) -> EventRows:
        convert = self.converters(table)
        self._check_columns(event, table, offset, convert.table.column_names)
        ts = int(event.timestamp)
        op: RowOp = (
            "insert"
            if isinstance(event, WriteRowsEvent)
            else "update"
            if isinstance(event, UpdateRowsEvent)
            else "delete"
        )
        decoded = self._decode(event, table, convert)
        if decoded is not None:
            return EventRows(table, op, decoded, offset, ts)
        image = convert.binlog_row
        if op == "update":
            sides = (("before_values", "before_none_sources"), ("after_values", "after_none_sources"))
            images = [image(r[values], r[nones]) for r in event.rows for values, nones in sides]
            return EventRows(table, op, images, offset, ts)  # before, after, before, …
        return EventRows(table, op, [image(r["values"], r["none_sources"]) for r in event.rows], offset, ts)

    def _decode(self, event: Any, table: TableId, convert: RowConverter) -> list[Any] | RawRows | None:
        """The event's row images by binlake's decoders (undecoded for the column decoder, in
        columnar mode), or None where the library must decode."""
        update = isinstance(event, UpdateRowsEvent)
        bitmaps = (
            (event.columns_present_bitmap, event.columns_present_bitmap2)
            if update
            else (event.columns_present_bitmap,)
        )
        lean = self.lean and bool(convert.table.primary_key) and not isinstance(event, WriteRowsEvent)
        if self.columnar:
            from binlake.source.column_decoder import ColumnDecoder, RawRows

            columns = self._column_decoders.get(table)
            if columns is None or columns.wire is not event.columns or columns.converter is not convert:
                columns = ColumnDecoder(convert.table, event.columns, convert, _key_at(convert))
                self._column_decoders[table] = columns
            if columns.supports(*bitmaps):
                return RawRows(columns, _row_data(event), update, lean)
        decoder = self._decoders.get(table)
        if decoder is None or decoder.wire is not event.columns or decoder.converter is not convert:
            from binlake.source.row_decoder import RowDecoder

            decoder = RowDecoder(convert.table, event.columns, convert, _key_at(convert))
            self._decoders[table] = decoder
        if not decoder.supports(*bitmaps):
            return None
        return decoder.images(_row_data(event), update, lean)

    def _check_columns(
        self, event: Any, table: TableId, offset: BinlogOffset, expected: tuple[str, ...]
    ) -> None:
        """Refuse rows whose columns differ from the schema in hand: decoding them by name would
        silently drop a new column or null a dropped one."""
        names = tuple(c.name for c in event.columns)
        unnamed = any(n is None or str(n).startswith("UNKNOWN_COL") for n in names)
        if (len(names) == len(expected)) if unnamed else (names == expected):
            return
        raise SchemaChangedError(
            f"The binlog at {offset} holds rows of {table} with columns ({', '.join(map(str, names))}), "
            f"but the schema in hand has ({', '.join(expected)}): the table changed by a statement "
            "binlake did not apply (the log names a table statement it could not read). Fix: "
            "re-snapshot the table (`binlake plan --replan`, `binlake snapshot`)."
        )


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value or "")


def _read_error(
    source: SourceConfig, start: BinlogOffset, error: pymysql.err.OperationalError
) -> BinlakeError:
    code = error.args[0] if error.args else None
    reason = str(error.args[1]) if len(error.args) > 1 else str(error)
    if code == _ER_MASTER_FATAL_READING_BINLOG:
        oldest = None
        with (
            contextlib.suppress(BinlakeError, pymysql.err.MySQLError),
            contextlib.closing(connect(source)) as conn,
        ):
            oldest = oldest_binlog(conn)
        return purged_error(start, oldest, reason)
    return BinlogReadError(f"Could not read the binlog from {start}: {reason} (error {code}).")


def purged_error(start: BinlogOffset, oldest: str | None, reason: str) -> BinlogPurgedError:
    """The error for a start offset the server no longer has: names it, the oldest one, the fix."""
    return BinlogPurgedError(
        f"Could not read the binlog from {start}: the server no longer has it ({reason}); the "
        f"oldest binlog file there is {oldest or 'unknown'}. Fix: a stream needs a new snapshot "
        "(`startup_mode: initial` with `binlake plan --replan`, or a backfill of its tables); a "
        "snapshot chunk is simply read again. Keep binlogs longer (`binlog_expire_logs_seconds`) "
        "than the stream may stop.",
        start,
        oldest,
    )
