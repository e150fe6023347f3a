"""The binlog at transport speed: the server's binlog files, transaction boundaries (event headers
and statement texts only, row events skipped undecoded), XA prepares, and the errors of a read.

``open_stream`` is the one place a ``BinLogStreamReader`` is made (``change_reader``'s docstring
says which settings matter and why).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XAPrepareEvent, XidEvent

from binlake.config import SourceConfig
from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset
from binlake.source.binlog import table_maps
from binlake.source.binlog.transport import BinlogConnection
from binlake.source.binlog.xa import PreparedXa, XaLocator, Xid, shared_locator, xa_statement
from binlake.source.server.connection import connect
from binlake.source.server.tls import connect_options

#: Server error when the requested binlog file or position is gone (purged) or invalid.
_ER_MASTER_FATAL_READING_BINLOG = 1236


#: MariaDB GTID event flag: the transaction is a single statement (DDL) without BEGIN/COMMIT.
FL_STANDALONE = 1


class BinlogPurgedError(BinlakeError):
    """The binlog no longer holds the requested start offset."""

    def __init__(self, message: str, offset: BinlogOffset, oldest: str | None) -> None:
        self.offset = offset
        self.oldest = oldest
        super().__init__(message)


class BinlogReadError(BinlakeError):
    """Reading the binlog failed for another reason."""


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
    micros: int | None = None
    """The fraction of the statement's start time in microseconds, where the server wrote it
    (MariaDB's ``Q_HRNOW``, MySQL's ``Q_MICROSECONDS``: when the statement read the current time
    to a fraction of a second)."""
    time_zone: str | None = None
    """The session time zone of the statement (``Q_TIME_ZONE_CODE``: ``SYSTEM``, ``+05:30``, a
    name), where the server wrote it — when the statement converted a time to local time."""
    sql_mode: int | None = None
    """The statement's session ``sql_mode`` bits (``Q_SQL_MODE_CODE``), where the server wrote
    them: whether a column's new type failed on values that did not fit, or converted them."""
    with_rows: bool = False
    """The statement is a ``CREATE TABLE … SELECT`` logged as a transaction (MariaDB): the new
    table's rows are in it, before this boundary, where the stream — which starts the table
    after its statement — does not read them."""


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


def open_stream(
    source: SourceConfig, server_id: int, start: BinlogOffset | None, **options: Any
) -> BinLogStreamReader:
    """A non-blocking binlog dump from ``start`` — or, with ``start`` None, from where ``options``
    say (``auto_position``: after a GTID set). The one place a dump is opened: secrets stay out
    of the library's log, compressed events arrive plain (``change_reader``'s docstring: the rest)."""
    table_maps.install()  # a table map is parsed once per distinct body (its docstring: why)
    where: dict[str, Any] = (
        {} if start is None else {"log_file": start.file, "log_pos": start.pos, "resume_stream": True}
    )
    return BinLogStreamReader(
        connection_settings=connection_settings(source),
        server_id=server_id,
        # Compressed events (MariaDB log_bin_compress, MySQL transaction compression) made plain.
        pymysql_wrapper=BinlogConnection,
        # Registered by name, so `validate` tells this pipeline's readers from other replicas.
        report_slave=source.replica_label,
        blocking=False,
        enable_logging=False,
        **where,
        **options,
    )


def connection_settings(source: SourceConfig) -> dict[str, Any]:
    """What a binlog dump's connections are opened with (``BinlogConnection``'s arguments)."""
    return {
        "host": source.hostname,
        "port": source.port,
        "user": source.username,
        "password": source.password.get_secret_value(),
        "connect_timeout": source.connect_timeout_s,
        **connect_options(source.tls),
    }


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
    stream = open_stream(
        source,
        server_id,
        start,
        only_events=[XidEvent, QueryEvent, GtidEvent, MariadbGtidEvent, XAPrepareEvent],
        only_tables=[""],
        only_schemas=[""],
    )
    in_transaction = False
    gtid: str | None = None
    created: QueryEvent | None = None  # a CREATE TABLE … SELECT inside the transaction
    previous = start
    try:
        for event in stream:
            offset = BinlogOffset(stream.log_file, stream.log_pos)
            if end is not None and offset > end:
                return
            if isinstance(event, MariadbGtidEvent):
                in_transaction = not event.flags & FL_STANDALONE
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
                text = text_of(event.query)
                keyword = text.strip().upper()
                xa = xa_statement(text) if keyword.startswith("XA") else None
                if keyword == "BEGIN" or (xa is not None and xa.verb == "start"):
                    in_transaction, created = True, None
                    continue
                if in_transaction and keyword not in ("COMMIT", "ROLLBACK"):
                    if keyword.startswith("CREATE"):
                        created = event  # MariaDB logs a CREATE … SELECT as its table, then rows
                    if xa is None or not xa.one_phase:
                        continue  # e.g. SAVEPOINT or XA END inside a transaction
                elif xa is not None and xa.verb in ("commit", "rollback"):
                    mark = None if xa.one_phase else XaMark(xa.verb, xa.xid)
            standalone = isinstance(event, QueryEvent) and not in_transaction and mark is None
            in_transaction = False
            yield _boundary(offset, event, gtid, mark, event if standalone else created)
            gtid, created = None, None
            previous = offset
    except pymysql.err.OperationalError as e:
        raise read_error(source, start, e) from None
    finally:
        stream.close()


def _boundary(
    offset: BinlogOffset, end: Any, gtid: str | None, mark: XaMark | None, statement: QueryEvent | None
) -> Boundary:
    """The boundary ``end`` (an event) makes at ``offset``, with the ``statement`` it ends, if any
    (a standalone one, or the CREATE of a transaction's ``CREATE TABLE … SELECT``)."""
    if statement is None:
        return Boundary(offset, int(end.timestamp), gtid, xa=mark)
    micros, time_zone = clock_of(statement)
    return Boundary(
        offset, int(end.timestamp), gtid, text_of(statement.query), text_of(statement.schema), mark,
        micros, time_zone, getattr(statement, "sql_mode", None), with_rows=statement is not end,
    )  # fmt: skip


def clock_of(event: Any) -> tuple[int | None, str | None]:
    """The statement's start-time fraction and session time zone, from the query event's status
    variables (absent attributes: the server did not write them)."""
    micros = getattr(event, "hrnow", None)
    if micros is None:
        micros = getattr(event, "microseconds", None)
    zone = getattr(event, "time_zone", None)
    return micros, (text_of(zone) if zone else None)


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


def text_of(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value or "")


def read_error(
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
