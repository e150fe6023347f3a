"""Who writes (or maintains) a sink table, until when: one holder at a time per table.

A holder is one run of a command in one process (``state/holders.py``), so a second ``binlake
stream`` is refused beside the first, not let in as "the stream" again. A lease whose holder's
process is known to be gone (this host, pid ended) is taken over at once; any other only once
expired. Leases written by binlake versions before holders were processes (``binlake_leases``)
are still honoured until they expire: such a process must be stopped before it is overlapped.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import (
    Column,
    ColumnElement,
    DateTime,
    MetaData,
    String,
    Table,
    delete,
    insert,
    inspect,
    select,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from tenacity import Retrying, before_sleep_log, retry_if_exception_type, stop_after_delay, wait_fixed

from binlake.errors import BinlakeError
from binlake.state.holders import Holder
from binlake.state.tables import aware, leases_table, utc_now, writers_table

log = logging.getLogger(__name__)

#: Seconds between two tries while a waiting holder waits.
RETRY_S = 5.0

# Leases of earlier versions, held by a role: read (never written) while one may still be live.
_legacy_leases = Table(
    "binlake_leases",
    MetaData(),  # not binlake's metadata: never created
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("acquired_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)


class Command(StrEnum):
    """The commands that hold sink tables (a lease names its holder's command)."""

    SNAPSHOT = "binlake snapshot"
    STREAM = "binlake stream"
    MAINTAIN = "binlake maintain"


class TableBusyError(BinlakeError):
    """Another binlake process holds the table."""

    def __init__(self, message: str, lease: Lease) -> None:
        self.lease = lease
        super().__init__(message)


@dataclass(frozen=True)
class Lease:
    """Who writes (or maintains) a sink table, until when."""

    pipeline: str
    table: str
    holder: str
    """The holder's command (``Command``)."""
    acquired_at: dt.datetime
    expires_at: dt.datetime
    process: Holder | None = None
    """The holding process (None: a lease of an earlier binlake version)."""

    def describe(self) -> str:
        who = self.process.describe(self.acquired_at) if self.process else f"`{self.holder}`"
        return (
            f"`{self.table}` is held by {who} (until {self.expires_at:%Y-%m-%d %H:%M:%S} UTC unless renewed)."
        )


class Leases:
    """The sink-table leases of one pipeline (``StateStore.leases``)."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def acquire(self, table: str, holder: Holder, ttl: dt.timedelta) -> Lease:
        """Take (or renew) ``holder``'s lease on a sink table for ``ttl``.

        A lease that has expired, or whose holder's process is gone, is taken over.

        Raises:
            TableBusyError: another holder's lease is live.
        """
        with self.engine.begin() as conn:
            return self._acquire(conn, table, holder, ttl, utc_now())

    def release(self, table: str, holder: Holder) -> None:
        """Give up ``holder``'s lease on ``table``; another holder's stays."""
        self.release_all([table], holder)

    def release_all(self, tables: Sequence[str], holder: Holder) -> None:
        """Give up ``holder``'s leases on ``tables`` (one transaction); others' stay."""
        with self.engine.begin() as conn:
            for table in tables:
                conn.execute(
                    delete(leases_table).where(*self._key(table), leases_table.c.token == holder.token)
                )

    def hold(self, tables: Sequence[str], holder: Holder, ttl: dt.timedelta, wait_s: float = 0.0) -> None:
        """Take (or renew) ``holder``'s lease on every table for ``ttl``, all or none (one
        transaction).

        ``wait_s`` says how long to wait, in all, while another holder's lease is live: 0 fails at once
        (a snapshot or maintenance run refuses to start beside a writer); the stream waits for
        maintenance to finish, trying again every ``RETRY_S`` seconds.

        Raises:
            TableBusyError: a table is still held by another holder after ``wait_s`` seconds.
        """
        # One deadline for all the tables.
        for attempt in Retrying(
            retry=retry_if_exception_type(TableBusyError),
            stop=stop_after_delay(wait_s),
            wait=wait_fixed(RETRY_S),
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        ):
            with attempt, self.engine.begin() as conn:
                now = utc_now()
                for table in tables:
                    self._acquire(conn, table, holder, ttl, now)

    def _acquire(
        self, conn: Connection, table: str, holder: Holder, ttl: dt.timedelta, now: dt.datetime
    ) -> Lease:
        current = self._current(conn, table)
        if current is not None and _live(current, holder, now) and not self._superseded(conn, current, now):
            raise TableBusyError(current.describe(), current)
        conn.execute(delete(leases_table).where(*self._key(table)))
        lease = Lease(self.pipeline, table, holder.command, now, now + ttl, holder)
        try:
            conn.execute(
                insert(leases_table).values(
                    pipeline=self.pipeline,
                    table_name=table,
                    token=holder.token,
                    holder=holder.to_json(),
                    acquired_at=current.acquired_at if current and _renewal(current, holder) else now,
                    expires_at=lease.expires_at,
                )
            )
        except IntegrityError:
            raise TableBusyError(f"`{table}` was taken by another process just now.", lease) from None
        return lease

    def _key(self, table: str) -> tuple[ColumnElement[bool], ...]:
        return (leases_table.c.pipeline == self.pipeline, leases_table.c.table_name == table)

    def _current(self, conn: Connection, table: str) -> Lease | None:
        row = conn.execute(select(leases_table).where(*self._key(table))).first()
        if row is not None:
            process = Holder.from_json(row.holder)
            return Lease(
                self.pipeline, table, process.command, aware(row.acquired_at), aware(row.expires_at), process
            )
        return self._legacy(conn, table)

    def _superseded(self, conn: Connection, lease: Lease, now: dt.datetime) -> bool:
        """Whether the lease's holder is no longer the pipeline's writer for its command (its writer
        lease expired, or another process took it over): its table leases go with it, so a
        writer that took over is not kept out by the tables of the one it replaced."""
        if lease.process is None:
            return False
        writer = conn.execute(
            select(writers_table.c.token, writers_table.c.expires_at).where(
                writers_table.c.pipeline == self.pipeline, writers_table.c.command == lease.process.key
            )
        ).first()
        if writer is None:
            return False  # a holder that is not a pipeline writer (a direct call): its own expiry rules
        return writer.token != lease.process.token or aware(writer.expires_at) <= now

    def _legacy(self, conn: Connection, table: str) -> Lease | None:
        if not inspect(conn).has_table(_legacy_leases.name):
            return None
        legacy = _legacy_leases.c
        row = conn.execute(
            select(_legacy_leases).where(legacy.pipeline == self.pipeline, legacy.table_name == table)
        ).first()
        if row is None:
            return None
        return Lease(self.pipeline, table, row.holder, aware(row.acquired_at), aware(row.expires_at))


def _live(lease: Lease, asking: Holder, now: dt.datetime) -> bool:
    """Whether ``lease`` keeps ``asking`` out: another holder's, unexpired, its process not gone."""
    if _renewal(lease, asking):
        return False
    if lease.process is not None and lease.process.command == asking.command:
        return False  # runs of one command share tables (a snapshot's chunk groups); its writer lease
        # keeps a second run of the same part out (``state/writers.py``)
    if lease.expires_at <= now:
        return False
    return lease.process is None or not lease.process.gone()


def _renewal(lease: Lease, asking: Holder) -> bool:
    """Whether ``lease`` is ``asking``'s own (a renewal, not a takeover)."""
    return lease.process is not None and lease.process.token == asking.token
