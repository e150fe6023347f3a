"""The lock-free chunk reader: a chunk's exact content at its high watermark, without any lock.

1. low watermark  — the current binlog offset;
2. select         — the chunk's key range, streamed ``fetch_size`` rows at a time;
3. high watermark — the current binlog offset again;
4. binlog         — if the offset moved, the changes of this table between the two watermarks whose
   key lies in the range are applied to the selected rows by key (insert and update replace the row,
   delete removes it), which gives exactly the range's content at the high watermark.

No ``LOCK TABLES``, ``FLUSH TABLES WITH READ LOCK`` or ``LOCK INSTANCE``, ever: the SELECT is an
ordinary consistent read. Test hooks run between the steps (Flink CDC's SnapshotPhaseHooks), so
tests can write to the table exactly where it hurts.

Tables without a primary key (split by a configured chunk key) cannot be corrected that way:
re-applying a change the SELECT already saw is harmless by key, but by whole-row identity it
counts the row twice. A keyless chunk is read with the watermarks as above; if no change touched
its range between them, it is exact. Otherwise it is read again

- on MariaDB, inside ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, whose exact binlog position
  MariaDB reports (``binlog_snapshot_file`` / ``binlog_snapshot_position``) without any lock: the
  chunk is exact at that position, which is both its low and high watermark;
- elsewhere, with the watermarks, until a read sees no change in its range (at most
  ``KEYLESS_ATTEMPTS`` reads).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pymysql
import pymysql.cursors

from binlake.config import SourceConfig
from binlake.errors import BinlakeError
from binlake.events import CreateTable, DataChange
from binlake.offsets import BinlogOffset
from binlake.schema.type_mapping import TEMPORAL_TYPES, RowConverter
from binlake.source.binlog.event_rows import UnreplicableChangeError
from binlake.source.binlog.scan import BinlogPurgedError, gtid_boundaries
from binlake.source.chunks.bulk_select import BulkSelect, PymysqlSelect, SelectError, make_bulk_select
from binlake.source.chunks.corrections import RangeTest, Row, apply_by_key
from binlake.source.chunks.splitter import Chunk
from binlake.source.chunks.watermarks import LowWatermark, consistent_snapshot, current_offset
from binlake.source.server.connection import ServerVersion, connect, server_version
from binlake.source.server.discovery import column_names, discover, same_schema, schema_difference

log = logging.getLogger(__name__)

Hook = Callable[[Chunk], None]

#: Reads of a keyless chunk before giving up when writes keep hitting its range (non-MariaDB).
KEYLESS_ATTEMPTS = 5
#: Reads of a chunk before giving up when changes it cannot replay keep landing between its
#: watermarks.
REPLAY_ATTEMPTS = 5


class ChunkReadError(BinlakeError):
    """A chunk could not be read; nothing of it was recorded."""

    def __init__(self, message: str, chunk: Chunk) -> None:
        self.chunk = chunk
        super().__init__(message)


class TableChangedError(ChunkReadError):
    """The table's schema changed while the snapshot read it."""


@dataclass
class SnapshotHooks:
    """Callables run between the steps of a chunk read (for tests)."""

    before_low_watermark: Hook | None = None
    after_low_watermark: Hook | None = None
    after_select: Hook | None = None
    after_high_watermark: Hook | None = None


@dataclass(frozen=True)
class ChunkResult:
    """A chunk's rows at its high watermark."""

    chunk: Chunk
    data: pa.Table
    low: BinlogOffset
    high: BinlogOffset
    selected_rows: int
    binlog_changes: int
    seconds: float
    zero_date_rows: int = 0
    """Rows of this read (SELECT or binlog) that held a zero date, read as NULL."""

    @property
    def row_count(self) -> int:
        return int(self.data.num_rows)


class ChunkReader:
    """Reads chunks of one table over one connection, in order (not thread-safe).

    Args:
        source: the pipeline's source section.
        table: the table's schema (from discovery).
        server_id: replica id for this reader's binlog reads (unique among concurrent readers).
        hooks: test hooks between the steps.
        consistent_snapshot: read keyless tables in a consistent snapshot (default: on MariaDB,
            which reports the snapshot's binlog position); False re-reads until clean.
    """

    def __init__(
        self,
        source: SourceConfig,
        table: CreateTable,
        server_id: int,
        hooks: SnapshotHooks | None = None,
        consistent_snapshot: bool | None = None,
    ) -> None:
        self.consistent_snapshot = consistent_snapshot
        self.source = source
        self.table = table
        self.server_id = server_id
        self.hooks = hooks or SnapshotHooks()
        self.converter = RowConverter(table)
        self._conn: pymysql.Connection[Any] | None = None
        self._version: ServerVersion | None = None
        self._bulk: BulkSelect | None = None
        self._low = LowWatermark(gtid_boundaries(source, server_id))

    def __enter__(self) -> ChunkReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(pymysql.err.Error):
                self._conn.close()
            self._conn = None

    def _connection(self) -> tuple[pymysql.Connection[Any], ServerVersion]:
        if self._conn is None or self._version is None:
            conn = connect(self.source)
            with conn.cursor() as cur:
                # TIMESTAMP values come back in UTC, as the binlog holds them.
                cur.execute("SET SESSION time_zone = '+00:00'")
            self._conn, self._version = conn, server_version(conn)
            self._bulk = make_bulk_select(self.source, self.table, conn)
        return self._conn, self._version

    def read(self, chunk: Chunk) -> ChunkResult:
        """Read ``chunk`` as it is at its high watermark (see the module docstring).

        Raises:
            ChunkReadError: the chunk cannot be read exactly, or holds zero dates under
                ``source.zero_dates: reject``.
        """
        result = self._read(chunk)
        zero = result.zero_date_rows
        if zero:
            dates = ", ".join(c.name for c in self.table.columns if c.data_type in TEMPORAL_TYPES)
            if self.source.zero_dates == "reject":
                raise ChunkReadError(
                    f"Chunk {chunk.name} {chunk.range} of `{self.table.table}` has {zero} rows with zero "
                    f"dates ('0000-00-00') in its date columns ({dates}), and `source.zero_dates: reject` "
                    "refuses them. Fix: correct those rows in MySQL, or set `source.zero_dates: null` to "
                    "read them as NULL.",
                    chunk,
                )
            log.warning("chunk %s of %s: %d rows with zero dates in %s read as NULL", chunk.name,
                        self.table.table, zero, dates)  # fmt: skip
        return result

    def check_schema(self, chunk: Chunk, high: BinlogOffset) -> None:
        """Raise ``TableChangedError`` if the table no longer has the schema the chunk was read
        with: a DDL between two chunk reads, or inside one, would leave chunks of two schemas in
        one sink table (and writes to a new column in chunks read after it lost)."""
        conn, _ = self._connection()
        found = discover(conn, [self.table.table])
        now = found[0] if found else None
        if now is not None and same_schema(now, self.table):
            return
        raise TableChangedError(
            f"The schema of `{self.table.table}` changed while the snapshot read it (found after chunk "
            f"{chunk.name}, high watermark {high}): "
            + (schema_difference(self.table, now) if now is not None else "the table is gone")
            + ". None of its chunks read in this Spark job was committed. Fix: none by hand — "
            "`binlake snapshot` reads the table again with its new schema.",
            chunk,
        )

    def _zero_dates_seen(self) -> int:
        """Zero dates the bulk SELECT and the binlog decoding have met so far (running counts)."""
        bulk = self._bulk.zero_dates if self._bulk is not None else 0
        return bulk + self.converter.zero_dates

    def _read(self, chunk: Chunk) -> ChunkResult:
        result = self._read_replayable(chunk)
        if self.table.primary_key or result.binlog_changes == 0:
            return result
        _, version = self._connection()
        snapshot = self.consistent_snapshot
        if snapshot if snapshot is not None else version.flavor == "mariadb":
            log.info("chunk %s of keyless `%s` changed while read: reading it in a consistent snapshot",
                     chunk.name, self.table.table)  # fmt: skip
            return self._read_in_snapshot(chunk)
        for attempt in range(2, KEYLESS_ATTEMPTS + 1):
            log.info("chunk %s of keyless `%s` changed while read: reading it again (read %d)",
                     chunk.name, self.table.table, attempt)  # fmt: skip
            result = self._read_replayable(chunk)
            if result.binlog_changes == 0:
                return result
        raise ChunkReadError(
            f"Could not read chunk {chunk.name} {chunk.range} of `{self.table.table}` exactly: the table "
            f"has no primary key, and writes hit the chunk's range during each of {KEYLESS_ATTEMPTS} reads. "
            "Fix: add a primary key, or read the table when it is quieter (`binlake snapshot` retries).",
            chunk,
        )

    def _read_replayable(self, chunk: Chunk) -> ChunkResult:
        """A read with watermarks whose binlog window binlake can replay; a window holding a
        change it cannot (rows logged as a statement, an image without the values needed) is read
        again, from new watermarks after it — the SELECT then sees that change."""
        for attempt in range(1, REPLAY_ATTEMPTS + 1):
            try:
                return self._read_with_watermarks(chunk)
            except UnreplicableChangeError as e:
                if attempt == REPLAY_ATTEMPTS:
                    raise ChunkReadError(
                        f"Could not read chunk {chunk.name} {chunk.range} of `{self.table.table}` exactly: "
                        f"each of {REPLAY_ATTEMPTS} reads met a change between its watermarks that binlake "
                        f"cannot replay. The last: {e}",
                        chunk,
                    ) from None
                log.info("chunk %s of `%s`: %s; reading it again after it", chunk.name, self.table.table,
                         e.gap.reason)  # fmt: skip
        raise AssertionError("unreachable")  # the loop returns or raises

    def _read_in_snapshot(self, chunk: Chunk) -> ChunkResult:
        started = time.monotonic()
        conn, _ = self._connection()
        _run(self.hooks.before_low_watermark, chunk)
        with consistent_snapshot(conn) as offset:
            log.info("snapshot step 1/4: consistent snapshot at %s for keyless chunk %s %s",
                     offset, chunk.name, chunk.range)  # fmt: skip
            _run(self.hooks.after_low_watermark, chunk)
            # In the transaction's own connection: connectorx could not see the snapshot.
            in_snapshot = PymysqlSelect(self.source, self.table, conn)
            data = self._select(in_snapshot, chunk)
        log.info("snapshot step 2/4: selected %d rows of chunk %s in the snapshot", data.num_rows, chunk.name)
        _run(self.hooks.after_select, chunk)
        log.info("snapshot steps 3-4/4: chunk %s is exact at %s, no binlog to apply", chunk.name, offset)
        _run(self.hooks.after_high_watermark, chunk)
        return ChunkResult(
            chunk, data, offset, offset, data.num_rows, 0, time.monotonic() - started, in_snapshot.zero_dates
        )

    def _read_with_watermarks(self, chunk: Chunk) -> ChunkResult:
        started = time.monotonic()
        conn, version = self._connection()
        zero_before = self._zero_dates_seen()
        _run(self.hooks.before_low_watermark, chunk)
        low = self._low.read(conn, version)
        log.info("snapshot step 1/4: low watermark %s for chunk %s %s", low, chunk.name, chunk.range)
        _run(self.hooks.after_low_watermark, chunk)
        assert self._bulk is not None  # made with the connection
        data = self._select(self._bulk, chunk)
        selected = data.num_rows
        log.info("snapshot step 2/4: selected %d rows of chunk %s %s", selected, chunk.name, chunk.range)
        _run(self.hooks.after_select, chunk)
        high = current_offset(conn, version)
        log.info("snapshot step 3/4: high watermark %s for chunk %s", high, chunk.name)
        _run(self.hooks.after_high_watermark, chunk)
        changes: list[DataChange] = []
        if high > low:
            changes = self._binlog_changes(chunk, low, high)
            if changes:
                data, changes = self._apply(conn, chunk, data, changes)
            log.info(
                "snapshot step 4/4: %d changes of %s between %s and %s applied to chunk %s",
                len(changes), self.table.table, low, high, chunk.name,
            )  # fmt: skip
        else:
            log.info("snapshot step 4/4: no binlog between the watermarks of chunk %s", chunk.name)
        zero = self._zero_dates_seen() - zero_before
        return ChunkResult(chunk, data, low, high, selected, len(changes), time.monotonic() - started, zero)

    # -- step 2 -------------------------------------------------------------------------------

    def _select(self, bulk: BulkSelect, chunk: Chunk) -> pa.Table:
        try:
            return bulk.select(chunk)
        except (SelectError, pymysql.err.ProgrammingError, pymysql.err.OperationalError) as e:
            raise self._select_error(e, chunk) from None

    def _select_error(self, error: Exception, chunk: Chunk) -> ChunkReadError:
        """Say why a chunk's SELECT failed; a dropped table or column is the usual cause."""
        what = f"Could not read chunk {chunk.name} {chunk.range} of `{self.table.table}`"
        assert self._conn is not None
        columns = set(column_names(self._conn, [self.table.table])[self.table.table])
        if not columns:
            return ChunkReadError(
                f"{what}: the table no longer exists (dropped or renamed after planning). "
                "Fix: plan again with `binlake plan --replan`.",
                chunk,
            )
        missing = [c for c in self.table.column_names if c not in columns]
        if missing:
            return ChunkReadError(
                f"{what}: columns {missing} no longer exist (changed after planning). "
                "Fix: plan again with `binlake plan --replan`.",
                chunk,
            )
        return ChunkReadError(f"{what}: {error}", chunk)

    # -- step 4 -------------------------------------------------------------------------------

    def _binlog_changes(self, chunk: Chunk, low: BinlogOffset, high: BinlogOffset) -> list[DataChange]:
        # Imported here: python-mysql-replication and the binlog reader are a daemon's import the
        # snapshot's first task waits for, and a chunk read while nothing writes has no window.
        from binlake.source.binlog.change_reader import BinlogReader

        reader = BinlogReader(
            self.source, self.server_id, low, high, {self.table.table}, lambda _: self.converter
        )
        try:
            return list(reader.changes())
        except BinlogPurgedError as e:
            raise ChunkReadError(
                f"Could not correct chunk {chunk.name} of `{self.table.table}` from the binlog "
                f"between {low} and {high}: {e} Nothing of the chunk was recorded; reading it again "
                "starts from new watermarks.",
                chunk,
            ) from None

    def _apply(
        self, conn: pymysql.Connection[Any], chunk: Chunk, data: pa.Table, changes: list[DataChange]
    ) -> tuple[pa.Table, list[DataChange]]:
        """Apply the changes that touch the chunk's range; returns the data and those changes."""
        key_column = self.table.column(chunk.key_column)
        in_range = RangeTest(conn, key_column, chunk.range)
        in_range.prepare(
            image[chunk.key_column] for c in changes for image in (c.before, c.after) if image is not None
        )
        relevant = [
            c
            for c in changes
            if any(image is not None and in_range(image[chunk.key_column]) for image in (c.before, c.after))
        ]
        if not self.table.primary_key or not relevant:
            return data, relevant  # keyless: the caller re-reads; see the module docstring
        names = self.table.column_names
        rows: list[Row] = list(zip(*(col.to_pylist() for col in data.columns), strict=True))
        result = apply_by_key(rows, relevant, names, self.table.primary_key, chunk.key_column, in_range)
        columns = [list(col) for col in zip(*result, strict=True)] if result else [[] for _ in names]
        return pa.Table.from_batches([self.converter.batch(columns)]), relevant


def _run(hook: Hook | None, chunk: Chunk) -> None:
    if hook is not None:
        hook(chunk)
