"""Who writes (or maintains) a sink table, until when: one holder at a time per table."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from binlake.errors import BinlakeError
from binlake.state.tables import aware, leases_table, utc_now


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
    acquired_at: dt.datetime
    expires_at: dt.datetime


class Leases:
    """The sink-table leases of one pipeline (``StateStore.leases``)."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def acquire(self, table: str, holder: str, ttl: dt.timedelta) -> Lease:
        """Take (or renew) the lease on a sink table for ``ttl``.

        A lease that has expired is taken over: its holder is gone (crashed) or late.

        Raises:
            TableBusyError: another holder's lease is live.
        """
        now = utc_now()
        with self.engine.begin() as conn:
            row = conn.execute(
                select(leases_table).where(
                    leases_table.c.pipeline == self.pipeline, leases_table.c.table_name == table
                )
            ).first()
            if row is not None:
                current = Lease(
                    row.pipeline, row.table_name, row.holder, aware(row.acquired_at), aware(row.expires_at)
                )
                if current.holder != holder and current.expires_at > now:
                    raise TableBusyError(
                        f"`{table}` is held by `{current.holder}` since "
                        f"{current.acquired_at:%Y-%m-%d %H:%M:%S} UTC "
                        f"(until {current.expires_at:%Y-%m-%d %H:%M:%S} UTC unless renewed).",
                        current,
                    )
                conn.execute(
                    delete(leases_table).where(
                        leases_table.c.pipeline == self.pipeline, leases_table.c.table_name == table
                    )
                )
            lease = Lease(self.pipeline, table, holder, now, now + ttl)
            try:
                conn.execute(
                    insert(leases_table).values(
                        pipeline=self.pipeline,
                        table_name=table,
                        holder=holder,
                        acquired_at=now,
                        expires_at=lease.expires_at,
                    )
                )
            except IntegrityError:
                raise TableBusyError(f"`{table}` was taken by another process just now.", lease) from None
        return lease

    def release(self, table: str, holder: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                delete(leases_table).where(
                    leases_table.c.pipeline == self.pipeline,
                    leases_table.c.table_name == table,
                    leases_table.c.holder == holder,
                )
            )
