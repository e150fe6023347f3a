"""The one adapter to python-mysql-replication: binlog events in, binlake ``DataChange`` events out.

Nothing else in binlake touches the library's event classes. Settings that matter, learned the
hard way:

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

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

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
from binlake.source.binlog.event_rows import (
    EventRows,
    Gap,
    RowOp,
    UnreplicableChangeError,
    any_absent,
    complete_images,
)
from binlake.source.binlog.scan import (
    FL_STANDALONE,
    BinlogReadError,
    open_stream,
    read_error,
    text_of,
    xa_locator,
)
from binlake.source.binlog.statement_gaps import cascade_gaps, dml_gaps, is_dml, load_gaps
from binlake.source.binlog.xa import FL_PREPARED_XA, PreparedXa, Xid, xa_statement

if TYPE_CHECKING:  # imported when used: the stream's planning side imports this module, not the
    # decoders (numpy, pyarrow, pyiceberg's types: 0.5 s at each query's start)
    from binlake.schema.type_mapping import RowConverter
    from binlake.source.binlog.column_decoder import ColumnDecoder, RawRows
    from binlake.source.binlog.row_decoder import RowDecoder

log = logging.getLogger(__name__)


def _row_data(event: Any) -> bytes:
    """What is left of a rows event after its header: the row images."""
    data: bytes = event.packet.read(event.event_size - event.packet.read_bytes)
    return data


def _key_at(convert: RowConverter) -> list[int]:
    """Positions of the table's primary key columns (what lean images hold)."""
    return [convert.table.column_names.index(k) for k in convert.table.primary_key]


class SchemaChangedError(BinlakeError):
    """Rows in the binlog were written with other columns than the schema binlake holds."""


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
        whole: tables whose images are decoded whole even when ``lean`` (a changelog keeps their
            before images: ``sink/history/changelog.py``).
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
        whole: frozenset[TableId] = frozenset(),
    ) -> None:
        self.source = source
        self.held = held or {}
        self.lean = lean
        self.whole = whole
        self.columnar = columnar
        self.prepares = prepares
        self._xa_group: list[EventRows | Gap] | None = None
        """Rows of the XA group being read (from its start to its prepare), held back."""
        self._prepared: dict[Xid, list[EventRows | Gap]] = {}
        """Rows of XA transactions prepared in the range read so far, until their decision."""
        self._in_transaction = False
        self.gtid: str | None = None
        """The GTID of the transaction whose rows ``events`` yields (an XA one's: its commit's)."""
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
        stream = open_stream(
            self.source,
            self.server_id,
            self.start,
            only_events=[
                WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent, XidEvent,
                QueryEvent, XAPrepareEvent, MariadbGtidEvent, GtidEvent, ExecuteLoadQueryEvent,
            ],
            only_schemas=sorted({t.database for t in self.tables}),
            only_tables=sorted({t.table for t in self.tables}),
        )  # fmt: skip
        try:
            yield from self._read(stream)
        except pymysql.err.OperationalError as e:
            raise read_error(self.source, self.start, e) from None
        finally:
            stream.close()

    def _read(self, stream: BinLogStreamReader) -> Iterator[EventRows | Gap]:
        for event in stream:
            offset = BinlogOffset(stream.log_file, stream.log_pos)
            if self.end is not None and offset > self.end:
                return
            if isinstance(event, MariadbGtidEvent | GtidEvent):  # MySQL's anonymous transactions have none
                self.gtid = str(event.gtid)
                if isinstance(event, MariadbGtidEvent):  # a group flagged as a prepared XA transaction:
                    self._xa_group = [] if event.flags & FL_PREPARED_XA else None  # its rows wait
                    self._in_transaction = not event.flags & FL_STANDALONE
                continue
            self.last_offset, self.last_timestamp = offset, int(event.timestamp)
            if isinstance(event, XAPrepareEvent):
                self._in_transaction = False
                yield from self._prepare(event, offset)
            elif isinstance(event, QueryEvent):
                text, ts = text_of(event.query), int(event.timestamp)
                yield from self._held(self._statement(text, text_of(event.schema), offset, ts))
            elif isinstance(event, ExecuteLoadQueryEvent):
                yield from self._held(load_gaps(event, self.tables, offset))
            elif isinstance(event, XidEvent):
                self._xa_group = None
                self._in_transaction = False
                self.gtid = None  # the next may have none (MySQL's anonymous transactions)
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
            yield from dml_gaps(text, database, self.tables, offset, timestamp)
        elif not self._in_transaction and keyword.startswith(("CREATE", "ALTER")):
            yield from cascade_gaps(text, database, self.tables, offset, timestamp)

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

    def _prepared_elsewhere(self, xid: Xid, commit: BinlogOffset) -> list[EventRows | Gap]:
        """The rows of ``xid`` committed at ``commit`` but prepared before this reader's start."""
        locator = xa_locator(self.source, self.server_id)
        locator.add(self.prepares)
        prepared = locator.find(xid, commit)
        reader = BinlogReader(
            self.source, self.server_id, prepared.start, prepared.end, self.tables, self.converters,
            lean=self.lean, columnar=self.columnar, whole=self.whole,
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
        if isinstance(decoded, list) and any_absent(decoded):
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
        lean = (
            self.lean
            and bool(convert.table.primary_key)
            and not isinstance(event, WriteRowsEvent)
            and table not in self.whole
        )
        if self.columnar and not partial_json:
            from binlake.source.binlog.column_decoder import ColumnDecoder, RawRows

            columns = self._column_decoders.get(table)
            if columns is None or columns.wire is not event.columns or columns.converter is not convert:
                columns = ColumnDecoder(convert.table, event.columns, convert, _key_at(convert))
                self._column_decoders[table] = columns
            if columns.supports(*bitmaps):
                return RawRows(columns, _row_data(event), update, lean)
        decoder = self._decoders.get(table)
        if decoder is None or decoder.wire is not event.columns or decoder.converter is not convert:
            from binlake.source.binlog.row_decoder import RowDecoder

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
