"""One writer per pipeline and command, fenced: a lease held by a process, and an epoch that only grows.

A writing command (``stream``, ``snapshot``, ``backfill``, ``maintain``, ``verify --repair``) claims
its pipeline's lease for that command at its start; a second process of the same command is
refused, naming the first. Each claim by a new holder raises the command's *epoch* by one. The
holder renews its lease while it runs (``state/fencing.py``); every state-store commit and every
Iceberg commit it makes checks that the lease is still its own, so a holder that lost it (paused
past its expiry, cut off, taken over) can never write again (README, "Running in production").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from binlake.errors import BinlakeError
from binlake.state.holders import Holder
from binlake.state.tables import aware, utc_now, writers_table


class WriterBusyError(BinlakeError):
    """Another process is the pipeline's writer for that command."""

    exit_code = 3


class FencedError(BinlakeError):
    """This process is no longer the pipeline's writer: another took over (or its lease is gone)."""

    exit_code = 3


@dataclass(frozen=True)
class WriterLease:
    """A process's claim to be a pipeline's writer for one command."""

    pipeline: str
    holder: Holder
    since: dt.datetime
    expires_at: dt.datetime
    epoch: int

    @property
    def command(self) -> str:
        """The lease's key: the holder's command, or the part of it that it writes."""
        return self.holder.key

    def describe(self) -> str:
        return f"{self.holder.describe(self.since)}, epoch {self.epoch}"


class Writers:
    """The writer leases of one pipeline (``StateStore.writers``)."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def claim(self, holder: Holder, ttl: dt.timedelta) -> WriterLease:
        """Become the pipeline's writer for ``holder.key`` for ``ttl``, at a new epoch.

        Raises:
            WriterBusyError: another process holds that lease and is live.
        """
        now = utc_now()
        with self.engine.begin() as conn:
            current = self._current(conn, holder.key, lock=True)
            if current is not None and current.expires_at > now and not current.holder.gone():
                raise WriterBusyError(
                    f"Pipeline `{self.pipeline}` already has a writer for `{holder.key}`: "
                    f"{current.describe()}, its lease valid until {current.expires_at:%Y-%m-%d %H:%M:%S} UTC "
                    "unless renewed. Two writers of one pipeline would overwrite each other's progress. "
                    f"Fix: wait for it to finish, or stop it (pid {current.holder.pid} on "
                    f"{current.holder.host}); a writer that died without releasing its lease on another "
                    "host is taken over once the lease expires."
                )
            lease = WriterLease(self.pipeline, holder, now, now + ttl, (current.epoch if current else 0) + 1)
            values = {
                "holder": holder.to_json(),
                "token": holder.token,
                "host": holder.host,
                "pid": holder.pid,
                "process_started": holder.started,
                "since": now,
                "expires_at": lease.expires_at,
                "epoch": lease.epoch,
            }
            try:
                if current is None:
                    conn.execute(
                        writers_table.insert().values(pipeline=self.pipeline, command=holder.key, **values)
                    )
                else:
                    conn.execute(update(writers_table).where(*self._key(holder.key)).values(**values))
            except IntegrityError:
                raise WriterBusyError(
                    f"Pipeline `{self.pipeline}`: another process became the writer for `{holder.key}` "
                    "just now. Fix: wait for it to finish."
                ) from None
        return lease

    def renew(self, lease: WriterLease, ttl: dt.timedelta) -> WriterLease:
        """Extend ``lease`` by ``ttl`` from now.

        Raises:
            FencedError: the lease is no longer this holder's.
        """
        now = utc_now()
        with self.engine.begin() as conn:
            self.check(conn, lease)
            conn.execute(update(writers_table).where(*self._key(lease.command)).values(expires_at=now + ttl))
        return WriterLease(lease.pipeline, lease.holder, lease.since, now + ttl, lease.epoch)

    def release(self, lease: WriterLease) -> None:
        """End ``lease`` now if it is still this holder's (the row and its epoch stay)."""
        with self.engine.begin() as conn:
            conn.execute(
                update(writers_table)
                .where(*self._key(lease.command), writers_table.c.token == lease.holder.token)
                .values(expires_at=utc_now())
            )

    def current(self, command: str) -> WriterLease | None:
        """The last writer of ``command`` (live or not), None if there never was one."""
        with self.engine.connect() as conn:
            return self._current(conn, command)

    def check(self, conn: Connection, lease: WriterLease) -> None:
        """Inside a transaction: go on only while ``lease`` is still this holder's.

        Raises:
            FencedError: another holder claimed it since (a higher epoch), or it was released.
        """
        current = self._current(conn, lease.command, lock=True)
        if current is None or current.holder.token != lease.holder.token:
            taker = f"by {current.describe()}" if current is not None else "(it is gone from the state store)"
            raise FencedError(
                f"This `{lease.command}` of pipeline `{self.pipeline}` (epoch {lease.epoch}) lost its writer "
                f"lease: it was taken over {taker}, most likely because this process was paused or cut off "
                "past the lease's expiry. Nothing more is written by it; what it committed before stays "
                "exact. Fix: none needed if the other writer runs; otherwise start the command again."
            )

    def _key(self, command: str) -> tuple[ColumnElement[bool], ...]:
        return (writers_table.c.pipeline == self.pipeline, writers_table.c.command == command)

    def _current(self, conn: Connection, command: str, lock: bool = False) -> WriterLease | None:
        query = select(writers_table).where(*self._key(command))
        row = conn.execute(query.with_for_update() if lock else query).first()
        if row is None:
            return None
        holder = dataclasses.replace(Holder.from_json(row.holder), token=row.token)  # the column rules
        return WriterLease(self.pipeline, holder, aware(row.since), aware(row.expires_at), row.epoch)
