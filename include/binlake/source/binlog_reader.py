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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    ExecuteLoadQueryEvent,
    GtidEvent,
    MariadbGtidEvent,
    QueryEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from binlake.config import SourceConfig
from binlake.errors import BinlakeError
from binlake.events import DataChange, TableId
from binlake.offsets import BinlogOffset
from binlake.source.binlog_transport import BinlogConnection
from binlake.source.connection import connect
from binlake.source.foreign_keys import adds_cascading_key, cascade_fix, ddl_target
from binlake.source.statement_dml import is_dml, written_tables
from binlake.source.xa import FL_PREPARED_XA, PreparedXa, XaLocator, Xid, shared_locator, xa_statement

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


class Gap(NamedTuple):
    """A change of a table binlake cannot replicate exactly from the binlog (rows logged as a
    statement, a row image without the values binlake needs): from ``offset`` on, the sink
    table can be exact again only after the table is read anew (a backfill)."""

    table: TableId
    reason: str
    """What was found (never a statement's text: it may hold secrets)."""
    fix: str
    """How to make the writing application log what binlake needs."""
    offset: BinlogOffset
    timestamp: int


class UnreplicableChangeError(BinlakeError):
    """A reader met a change it cannot replicate exactly (see ``Gap``)."""

    def __init__(self, gap: Gap) -> None:
        self.gap = gap
        super().__init__(gap_message(gap))


def gap_message(gap: Gap, what: str = "") -> str:
    """The error text for a gap: what, where, why, and the fix."""
    return (
        f"The binlog at {gap.offset} holds a change of `{gap.table}` binlake cannot replicate exactly: "
        f"{gap.reason}.{what} Fix: {gap.fix}; then read the table anew with "
        f"`binlake backfill --table {gap.table}` — a stream passes this position once such a backfill, "
        "read after it, is staged."
    )


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
    xa: XaMark | None = None
    """What the transaction ending here does to an XA transaction, if anything."""


class XaMark(NamedTuple):
    """An XA transaction's prepare (its event group is ``start``..the boundary), commit or rollback."""

    verb: Literal["prepare", "commit", "rollback"]
    xid: Xid
    start: BinlogOffset | None = None


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
        # Compressed events (MariaDB log_bin_compress, MySQL transaction compression) made plain.
        pymysql_wrapper=BinlogConnection,
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
    An XA transaction's prepared group ends at its ``XA_PREPARE`` event (a boundary marked
    ``prepare``); its ``XA COMMIT``/``XA ROLLBACK`` is a boundary of its own (marked, no statement).
    """
    # The library parses every table map (column types, names, charsets) unless its table is
    # filtered out; a name no table has makes each one stop after its header (measured: table maps
    # were most of the scan's time on small transactions).
    stream = _open(
        source,
        server_id,
        start,
        only_events=[XidEvent, QueryEvent, GtidEvent, MariadbGtidEvent, XAPrepareEvent],
        only_tables=[""],
        only_schemas=[""],
    )
    in_transaction = False
    gtid: str | None = None
    previous = start
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
            mark: XaMark | None = None
            if isinstance(event, XAPrepareEvent):
                xid = Xid(event.xid_format_id, bytes(event.xid_gtrid), bytes(event.xid_bqual))
                mark = None if event.one_phase else XaMark("prepare", xid, previous)
            elif isinstance(event, QueryEvent):
                text = _text(event.query)
                keyword = text.strip().upper()
                xa = xa_statement(text) if keyword.startswith("XA") else None
                if keyword == "BEGIN" or (xa is not None and xa.verb == "start"):
                    in_transaction = True
                    continue
                if in_transaction and keyword not in ("COMMIT", "ROLLBACK"):
                    if xa is None or not xa.one_phase:
                        continue  # e.g. SAVEPOINT or XA END inside a transaction
                elif xa is not None and xa.verb in ("commit", "rollback"):
                    mark = None if xa.one_phase else XaMark(xa.verb, xa.xid)
            standalone = isinstance(event, QueryEvent) and not in_transaction and mark is None
            in_transaction = False
            statement = _text(event.query) if standalone else None
            database = _text(event.schema) if standalone else ""
            yield Boundary(offset, int(event.timestamp), gtid, statement, database, mark)
            gtid = None
            previous = offset
    except pymysql.err.OperationalError as e:
        raise _read_error(source, start, e) from None
    finally:
        stream.close()


def prepared_transactions(
    source: SourceConfig, server_id: int, start: BinlogOffset, end: BinlogOffset
) -> Iterator[PreparedXa]:
    """The XA transactions prepared in (start, end]: each one's event group."""
    for boundary in transactions(source, server_id, start, end):
        mark = boundary.xa
        if mark is not None and mark.verb == "prepare" and mark.start is not None:
            yield PreparedXa(mark.xid, mark.start, boundary.offset)


def gtid_boundaries(
    source: SourceConfig, server_id: int
) -> Callable[[BinlogOffset, BinlogOffset], Iterator[tuple[BinlogOffset, str | None]]]:
    """The transaction boundaries of a range with their GTIDs (for ``watermarks.LowWatermark``)."""

    def boundaries(start: BinlogOffset, end: BinlogOffset) -> Iterator[tuple[BinlogOffset, str | None]]:
        for boundary in transactions(source, server_id, start, end):
            yield boundary.offset, boundary.gtid

    return boundaries


def xa_locator(source: SourceConfig, server_id: int) -> XaLocator:
    """The process's XA locator for ``source`` (see ``source.xa``)."""

    def files() -> list[tuple[str, int]]:
        with contextlib.closing(connect(source)) as conn:
            return binary_logs(conn)

    def scan(start: BinlogOffset, end: BinlogOffset) -> Iterator[PreparedXa]:
        return prepared_transactions(source, server_id, start, end)

    return shared_locator(source.hostname, source.port, lambda: XaLocator(scan, files))


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
        prepares: XA prepares known to lie before ``start`` (the planning side scanned them), so
            a commit in the range finds its rows without scanning for them.
        held: per table, a position up to which the snapshot holds its rows (``snapshot.spans``):
            its rows events there are skipped undecoded (they may have other columns than the
            schema in hand, and the snapshot filter would drop them anyway).

    XA transactions (``source.xa``) come out at their ``XA COMMIT``, with its position and time;
    rolled back or still prepared at ``end``, not at all.
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
        prepares: Sequence[PreparedXa] = (),
        held: Mapping[TableId, BinlogOffset] | None = None,
    ) -> None:
        self.source = source
        self.held = held or {}
        self.lean = lean
        self.columnar = columnar
        self.prepares = prepares
        self._xa_group: list[EventRows | Gap] | None = None
        """Rows of the XA group being read (from its start to its prepare), held back."""
        self._prepared: dict[Xid, list[EventRows | Gap]] = {}
        """Rows of XA transactions prepared in the range read so far, until their decision."""
        self._in_transaction = False
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
            if isinstance(event, Gap):
                raise UnreplicableChangeError(event)
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

    def events(self) -> Iterator[EventRows | Gap]:
        """The rows events of the tables in binlog order, each with all its row images (the
        stream's path: its consumer handles an event's rows at once), and a ``Gap`` where a
        change of a table cannot be replicated exactly."""
        stream = _open(
            self.source,
            self.server_id,
            self.start,
            only_events=[
                WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent, XidEvent,
                QueryEvent, XAPrepareEvent, MariadbGtidEvent, ExecuteLoadQueryEvent,
            ],
            only_schemas=sorted({t.database for t in self.tables}),
            only_tables=sorted({t.table for t in self.tables}),
        )  # fmt: skip
        try:
            yield from self._read(stream)
        except pymysql.err.OperationalError as e:
            raise _read_error(self.source, self.start, e) from None
        finally:
            stream.close()

    def _read(self, stream: BinLogStreamReader) -> Iterator[EventRows | Gap]:
        for event in stream:
            offset = BinlogOffset(stream.log_file, stream.log_pos)
            if self.end is not None and offset > self.end:
                return
            if isinstance(event, MariadbGtidEvent):
                # A group MariaDB flags as a prepared XA transaction: its rows wait for its decision.
                self._xa_group = [] if event.flags & FL_PREPARED_XA else None
                self._in_transaction = not event.flags & _FL_STANDALONE
                continue
            self.last_offset, self.last_timestamp = offset, int(event.timestamp)
            if isinstance(event, XAPrepareEvent):
                self._in_transaction = False
                yield from self._prepare(event, offset)
            elif isinstance(event, QueryEvent):
                text, ts = _text(event.query), int(event.timestamp)
                yield from self._held(self._statement(text, _text(event.schema), offset, ts))
            elif isinstance(event, ExecuteLoadQueryEvent):
                yield from self._held(self._loaded(event, offset))
            elif isinstance(event, XidEvent):
                self._xa_group = None
                self._in_transaction = False
            elif (table := TableId(event.schema, event.table)) in self.tables:
                if self._snapshot_holds(table, offset):
                    continue
                yield from self._held([self._event_rows(event, table, offset)])

    def _snapshot_holds(self, table: TableId, offset: BinlogOffset) -> bool:
        # Rows of an XA group count where it commits, which may be later: they are decoded.
        until = self.held.get(table)
        return until is not None and offset <= until and self._xa_group is None

    def _held(self, items: Iterable[EventRows | Gap]) -> Iterator[EventRows | Gap]:
        """``items`` now, or with the XA group being read (its decision comes later)."""
        for item in items:
            if self._xa_group is not None:
                self._xa_group.append(item)
            else:
                yield item

    def _prepare(self, event: Any, offset: BinlogOffset) -> Iterator[EventRows | Gap]:
        """The end of an XA group: rows committed here (one phase), or held until the decision."""
        group, self._xa_group = self._xa_group or [], None
        if event.one_phase:
            yield from (r._replace(offset=offset, timestamp=int(event.timestamp)) for r in group)
            return
        xid = Xid(event.xid_format_id, bytes(event.xid_gtrid), bytes(event.xid_bqual))
        self._prepared[xid] = group

    def _statement(
        self, text: str, database: str, offset: BinlogOffset, timestamp: int
    ) -> Iterator[EventRows | Gap]:
        """Statements inside transactions: XA (a group's start on MySQL, a one-phase commit, a
        commit or a rollback), BEGIN/COMMIT, and row changes a session logged as statements."""
        keyword = text.lstrip()[:6].upper()
        if keyword.startswith("BEGIN"):
            self._in_transaction = True
            return
        if keyword.startswith(("COMMIT", "ROLLBA")):
            self._in_transaction = False
            return
        if keyword[:2] == "XA":
            yield from self._xa(text, offset, timestamp)
            return
        if self._in_transaction and is_dml(text):
            yield from self._statement_gaps(text, database, offset, timestamp)
        elif not self._in_transaction and keyword.startswith(("CREATE", "ALTER")):
            yield from self._cascade_gap(text, database, offset, timestamp)

    def _xa(self, text: str, offset: BinlogOffset, timestamp: int) -> Iterator[EventRows | Gap]:
        xa = xa_statement(text)
        if xa is None:
            return
        if xa.verb == "start":
            self._xa_group = []
            self._in_transaction = True
        elif xa.one_phase:  # the group itself ends committed
            group, self._xa_group = self._xa_group or [], None
            self._in_transaction = False
            yield from (r._replace(offset=offset, timestamp=timestamp) for r in group)
        elif xa.verb == "rollback":
            self._prepared.pop(xa.xid, None)
        elif xa.verb == "commit":
            held = self._prepared.pop(xa.xid, None)
            if held is None:
                held = self._prepared_elsewhere(xa.xid, offset)
            yield from (r._replace(offset=offset, timestamp=timestamp) for r in held)

    def _statement_gaps(
        self, text: str, database: str, offset: BinlogOffset, timestamp: int
    ) -> Iterator[Gap]:
        """A row change logged as a statement: a gap in every captured table it may write."""
        written = written_tables(text, database)
        tables = sorted(self.tables if written is None else written & self.tables)
        what = (
            "rows changed by a statement logged as text (`binlog_format` STATEMENT or MIXED in the "
            "writing session), not as row images"
        )
        if written is None:
            what += "; binlake could not tell which tables it writes, so it stops for each one it captures"
        for table in tables:
            yield Gap(table, what, _STATEMENT_FIX, offset, timestamp)

    def _cascade_gap(self, text: str, database: str, offset: BinlogOffset, timestamp: int) -> Iterator[Gap]:
        """A captured table that gains a cascading foreign key: the rows the server will change
        through it never reach the binlog (``source.foreign_keys``)."""
        target = ddl_target(text, database)
        if target is not None and target in self.tables and adds_cascading_key(text):
            yield Gap(
                target,
                "a foreign key with ON DELETE/UPDATE CASCADE or SET NULL/DEFAULT was declared on it: the "
                "child rows the server changes through it are not in the binlog",
                cascade_fix(),
                offset,
                timestamp,
            )

    def _loaded(self, event: Any, offset: BinlogOffset) -> Iterator[Gap]:
        """``LOAD DATA`` logged as a statement: its rows are in a file the binlog does not hold."""
        table = _text(event.table_name) if hasattr(event, "table_name") else ""
        database = _text(event.schema)
        named = [t for t in self.tables if t.table == table and t.database == database]
        for target in named or sorted(self.tables):
            yield Gap(
                target,
                "rows loaded by `LOAD DATA` logged as a statement (`binlog_format` STATEMENT or MIXED)",
                _STATEMENT_FIX,
                offset,
                int(event.timestamp),
            )

    def _prepared_elsewhere(self, xid: Xid, commit: BinlogOffset) -> list[EventRows | Gap]:
        """The rows of ``xid`` committed at ``commit`` but prepared before this reader's start."""
        locator = xa_locator(self.source, self.server_id)
        locator.add(self.prepares)
        prepared = locator.find(xid, commit)
        reader = BinlogReader(
            self.source, self.server_id, prepared.start, prepared.end, self.tables, self.converters,
            lean=self.lean, columnar=self.columnar,
        )  # fmt: skip
        for _ in reader.events():
            pass  # a prepared group yields nothing: its rows wait in ``_prepared``
        return reader._prepared.get(xid, [])

    def _event_rows(self, event: Any, table: TableId, offset: BinlogOffset) -> EventRows | Gap:
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
        if decoded is None:
            image = convert.binlog_row
            if op == "update":
                sides = (("before_values", "before_none_sources"), ("after_values", "after_none_sources"))
                decoded = [image(r[values], r[nones]) for r in event.rows for values, nones in sides]
            else:
                decoded = [image(r["values"], r["none_sources"]) for r in event.rows]
        if isinstance(decoded, list) and _any_absent(decoded):
            return complete_images(table, op, decoded, convert.table, offset, ts)
        return EventRows(table, op, decoded, offset, ts)  # updates: before, after, before, …

    def _decode(self, event: Any, table: TableId, convert: RowConverter) -> list[Any] | RawRows | None:
        """The event's row images by binlake's decoders (undecoded for the column decoder, in
        columnar mode), or None where the library must decode."""
        update = isinstance(event, UpdateRowsEvent)
        partial_json = isinstance(event, PartialUpdateRowsEvent)
        bitmaps = (
            (event.columns_present_bitmap, event.columns_present_bitmap2)
            if update
            else (event.columns_present_bitmap,)
        )
        lean = self.lean and bool(convert.table.primary_key) and not isinstance(event, WriteRowsEvent)
        if self.columnar and not partial_json:
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
            if partial_json:  # the library reads only the first diff of a partial JSON value
                raise BinlogReadError(
                    f"The binlog holds a partial JSON update of `{table}` in a table binlake's decoder "
                    "cannot read (a column of a pre-5.6 temporal type). Fix: set "
                    "`binlog_row_value_options = ''` on the server."
                )
            return None
        # A partial after image is completed from the before image: decode all of it then.
        full = not partial_json and all(b == decoder.all_present for b in bitmaps)
        return decoder.images(_row_data(event), update, lean and full, bitmaps, partial_json)

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


_STATEMENT_FIX = (
    "make the application log rows: `SET SESSION binlog_format = 'ROW'` in its sessions (or drop "
    "its override of the server's ROW format)"
)


def _any_absent(images: list[Any]) -> bool:
    from binlake.source.row_decoder import ABSENT

    return any(image is not None and ABSENT in image for image in images)


def complete_images(
    table: TableId, op: RowOp, images: list[Any], schema: Any, offset: BinlogOffset, timestamp: int
) -> EventRows | Gap:
    """Images of an event without every column (``binlog_row_image`` NOBLOB or MINIMAL), made as
    complete as the event allows: an update's after image takes what its before image holds (the
    key, under MINIMAL), an insert's absent columns their default — a NULL, a number or a string
    (an expression default such as CURRENT_TIMESTAMP is a gap: its value was the server's own).
    Columns an update's after image still lacks stay ``ABSENT``: the row's previous value, which
    the stream takes from the sink."""
    from binlake.schema.defaults import literal_default
    from binlake.source.row_decoder import ABSENT

    completed: list[Any] = []
    if op == "update":
        for i in range(0, len(images), 2):
            before, after = images[i], images[i + 1]
            if ABSENT in after:
                after = tuple(b if a is ABSENT else a for a, b in zip(after, before, strict=True))
            completed += [before, after]
        return EventRows(table, op, completed, offset, timestamp)
    if op == "delete":
        keys = set(schema.primary_key)
        for image in images:
            lacking = [c.name for c, v in zip(schema.columns, image, strict=True) if v is ABSENT]
            if lacking and (not keys or keys & set(lacking)):
                return Gap(
                    table,
                    f"a delete whose row image lacks column(s) {', '.join(lacking)} needed to find the "
                    "row (`binlog_row_image` NOBLOB or MINIMAL in the writing session)",
                    _IMAGE_FIX,
                    offset,
                    timestamp,
                )
        return EventRows(table, op, images, offset, timestamp)
    defaults = {c.name: literal_default(c) for c in schema.columns}
    for image in images:
        row = list(image)
        for i, column in enumerate(schema.columns):
            if row[i] is not ABSENT:
                continue
            default = defaults[column.name]
            if default is None:
                return Gap(
                    table,
                    f"an insert without a value for column `{column.name}` (`binlog_row_image` NOBLOB or "
                    f"MINIMAL in the writing session), whose default `{column.default}` only the server "
                    "could evaluate",
                    _IMAGE_FIX,
                    offset,
                    timestamp,
                )
            row[i] = default.value
        completed.append(tuple(row))
    return EventRows(table, op, completed, offset, timestamp)


_IMAGE_FIX = (
    "make the application log full row images: `SET SESSION binlog_row_image = 'FULL'` in its "
    "sessions (or drop its override of the server's FULL)"
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
