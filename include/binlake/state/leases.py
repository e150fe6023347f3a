"""Who writes (or maintains) a sink table, until when: one holder at a time per table."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from tenacity import Retrying, before_sleep_log, retry_if_exception_type, stop_after_delay, wait_fixed

from binlake.errors import BinlakeError
from binlake.state.tables import aware, leases_table, utc_now

log = logging.getLogger(__name__)

#: Seconds between two tries while a waiting holder waits.
RETRY_S = 5.0


class Holder(StrEnum):
    """Who holds a sink table (stored in the lease: another process names it in its refusal)."""

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

    def hold(self, tables: Sequence[str], holder: Holder, ttl: dt.timedelta, wait_s: float = 0.0) -> None:
        """Take (or renew) ``holder``'s lease on every table for ``ttl``.

        ``wait_s`` says how long to wait, in all, while another holder's lease is live: 0 fails at once
        (a snapshot or maintenance run refuses to start beside a writer); the stream waits for
        maintenance to finish, trying again every ``RETRY_S`` seconds.

        Raises:
            TableBusyError: a table is still held by another holder after ``wait_s`` seconds.
        """
        # One deadline for all the tables (a retry renews the leases already taken).
        for attempt in Retrying(
            retry=retry_if_exception_type(TableBusyError),
            stop=stop_after_delay(wait_s),
            wait=wait_fixed(RETRY_S),
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        ):
            with attempt:
                for table in tables:
                    self.acquire(table, holder, ttl)
