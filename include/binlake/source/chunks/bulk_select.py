"""The chunk SELECT: a key range of one table into a typed Arrow table, as fast as it goes.

Two readers give the same result (tests compare them type by type):

- ``connectorx`` (default): Rust decodes the rows straight into Arrow, about ten times the rate of
  pymysql's per-value Python decoding, which is what bounds a Python snapshot
  (docs/benchmarks.md). Types it reads differently are selected as expressions (TIME as microseconds,
  DECIMAL as exact text, geometries as WKB) and cast exactly in Arrow. Dates are read as they are
  until connectorx meets a zero date, which it refuses (it never reads one as anything else): from
  that chunk on, the table's dates are selected through a check that reads zero dates as NULL and
  counts them — the check costs the server a third of a date-heavy table's SELECT, so it is paid
  only where zero dates are.
- ``pymysql``: a streamed (unbuffered) cursor and column-wise normalisation; the fallback, and the
  reader inside a consistent-snapshot transaction (connectorx opens connections of its own).

Both read ``fetch_size`` rows at a time and never take a lock.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Protocol
from urllib.parse import quote as url_quote

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
import pymysql.cursors

from binlake.config import SourceConfig
from binlake.errors import BinlakeError
from binlake.events import Column, CreateTable, quote
from binlake.logs import redact, register_secret
from binlake.schema.type_mapping import GEOMETRY_TYPES, TEMPORAL_TYPES, RowConverter, is_bool
from binlake.source.chunks.splitter import Chunk
from binlake.source.server.cursors import SSCursor

log = logging.getLogger(__name__)

_UTC_SESSION = "SET time_zone = '+00:00'"
_ZERO_FLAG = "binlake__zero_date"
#: connectorx's panic on a zero or partly zero date (mysql_common cannot make a chrono date of it).
_ZERO_DATE_REFUSED = re.compile(r"chrono::naive::\w+::Naive(?:Date|DateTime)>`: Couldn't convert the value")


class SelectError(BinlakeError):
    """The bulk SELECT of a chunk failed."""


class BulkSelect(Protocol):
    """Reads one chunk's key range into an Arrow table of the table's schema."""

    @property
    def zero_dates(self) -> int:
        """Rows read so far that held a zero date (read as NULL)."""

    def select(self, chunk: Chunk) -> pa.Table: ...


def select_expression(column: Column, zero_dates: bool = True) -> str:
    """The SELECT expression that reads ``column`` in a form connectorx decodes exactly; with
    ``zero_dates``, a zero or partly zero date reads as NULL (without, connectorx refuses it)."""
    name = quote(column.name)
    t = column.data_type
    if t == "time":
        return f"CAST(TIME_TO_SEC({name}) * 1000000 AS SIGNED) AS {name}"
    if t in ("date", "datetime", "timestamp") and zero_dates:
        # Zero and partly-zero dates ('0000-00-00', '2024-02-00') read as NULL.
        return f"IF(MONTH({name}) = 0 OR DAYOFMONTH({name}) = 0, NULL, {name}) AS {name}"
    if t == "decimal" or t == "json":
        return f"CAST({name} AS CHAR) AS {name}"
    if t == "bit" and is_bool(column):
        return f"CAST({name} AS UNSIGNED) AS {name}"
    if t in GEOMETRY_TYPES:
        return f"ST_AsBinary({name}) AS {name}"
    return name


def text_select_list(columns: list[Column]) -> str:
    """The SELECT list that reads ``columns`` exactly over the text protocol (pymysql).

    The text protocol renders FLOAT with 6 significant digits (1234.5678 comes back as 1234.57, a
    different float than the one stored); as a DOUBLE expression the server renders the stored
    value exactly, and Arrow's float32 takes it back to the very same float.
    """
    names = [quote(c.name) for c in columns]
    return ", ".join(
        f"({n} + 0e0) AS {n}" if c.data_type == "float" else n for c, n in zip(columns, names, strict=True)
    )


class ConnectorxSelect:
    """Chunk SELECTs through connectorx (see the module docstring)."""

    def __init__(self, source: SourceConfig, table: CreateTable, conn: pymysql.Connection[Any]) -> None:
        import connectorx  # imported here: a heavy native module only snapshot readers need

        self._connectorx = connectorx
        self.source = source
        self.table = table
        self.schema = RowConverter(table).schema
        self._literal = conn.escape  # pymysql escapes the chunk borders (charset-aware)
        password = source.password.get_secret_value()
        register_secret(password)
        register_secret(url_quote(password, safe=""))
        self._uri = (
            f"mysql://{url_quote(source.username, safe='')}:{url_quote(password, safe='')}"
            f"@{source.hostname}:{source.port}/{url_quote(table.table.database, safe='')}"
            # Stay on TCP: for a local server the driver would switch to the unix socket, where
            # the server matches the login to another account ('user'@'localhost').
            "?prefer_socket=false"
        )
        self._checked = ", ".join(select_expression(c) for c in table.columns)
        temporal = [quote(c.name) for c in table.columns if c.data_type in TEMPORAL_TYPES]
        if temporal:
            flags = " OR ".join(f"IFNULL(MONTH({c}) = 0 OR DAYOFMONTH({c}) = 0, 0)" for c in temporal)
            self._checked += f", CAST({flags} AS UNSIGNED) AS {_ZERO_FLAG}"
        # Dates as they are until a zero date is met (the module docstring).
        self._columns = ", ".join(select_expression(c, zero_dates=False) for c in table.columns)
        self._dates_checked = not temporal
        self.zero_dates = 0

    def select(self, chunk: Chunk) -> pa.Table:
        where, params = chunk.where()
        # connectorx takes no query parameters: the borders are escaped by pymysql.
        parts = where.split("%s")
        where = parts[0] + "".join(self._literal(p) + part for p, part in zip(params, parts[1:], strict=True))
        try:
            batches = self._batches(chunk, where)
        except BaseException as e:  # connectorx raises RuntimeError, and PanicException (a BaseException)
            if isinstance(e, KeyboardInterrupt | SystemExit):
                raise
            raise SelectError(
                f"Could not select chunk {chunk.name} {chunk.range} of `{self.table.table}` through "
                f"connectorx: {redact(str(e))[:500]}. If this is a type connectorx cannot read, set "
                "`source.select_reader: pymysql`."
            ) from None
        return self._typed(batches)

    def _batches(self, chunk: Chunk, where: str) -> list[pa.RecordBatch]:
        try:
            return self._read(where)
        except BaseException as e:
            if self._dates_checked or not _ZERO_DATE_REFUSED.search(str(e)):
                raise
        log.info(
            "chunk %s of `%s` holds zero dates, which connectorx refuses (its message above): the "
            "table's dates are read through a check from now on (zero dates as NULL)",
            chunk.name, self.table.table,
        )  # fmt: skip
        self._columns, self._dates_checked = self._checked, True
        return self._read(where)

    def _read(self, where: str) -> list[pa.RecordBatch]:
        sql = f"SELECT {self._columns} FROM {self.table.table.quoted()} WHERE {where}"
        reader = self._connectorx.read_sql(
            self._uri,
            sql,
            return_type="arrow_stream",
            batch_size=self.source.fetch_size,
            pre_execution_query=_UTC_SESSION,
        )
        return list(reader)

    def _typed(self, batches: list[pa.RecordBatch]) -> pa.Table:
        if not batches:
            return self.schema.empty_table()
        if _ZERO_FLAG in batches[0].schema.names:
            self.zero_dates += sum(int(pc.sum(b.column(_ZERO_FLAG)).as_py() or 0) for b in batches)
        arrays = []
        for field in self.schema:
            column = pa.chunked_array([b.column(field.name) for b in batches])
            arrays.append(column if column.type == field.type else pc.cast(column, field.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)


class PymysqlSelect:
    """Chunk SELECTs through a streamed pymysql cursor on the reader's own connection."""

    def __init__(self, source: SourceConfig, table: CreateTable, conn: pymysql.Connection[Any]) -> None:
        self.source = source
        self.table = table
        self.conn = conn
        self.converter = RowConverter(table)
        self._names = text_select_list(list(table.columns))

    @property
    def zero_dates(self) -> int:
        return self.converter.zero_dates

    def select(self, chunk: Chunk) -> pa.Table:
        where, params = chunk.where()
        rows: list[tuple[Any, ...]] = []
        with self.conn.cursor(SSCursor) as cur:  # rows stream, fetch_size at a time
            cur.execute(f"SELECT {self._names} FROM {self.table.table.quoted()} WHERE {where}", params)
            while batch := cur.fetchmany(self.source.fetch_size):
                rows.extend(batch)
        return pa.Table.from_batches([self.converter.batch(self.converter.select_columns(rows))])


def make_bulk_select(source: SourceConfig, table: CreateTable, conn: pymysql.Connection[Any]) -> BulkSelect:
    """The configured reader (``source.select_reader``). connectorx's connections take no CA or
    client certificate, so a ``source.tls.mode`` that requires TLS reads through pymysql, on the
    connection already verified."""
    if (
        source.select_reader == "connectorx"
        and source.tls.mode in ("disabled", "preferred")
        and not source.tls.cert
    ):
        return ConnectorxSelect(source, table, conn)
    return PymysqlSelect(source, table, conn)
