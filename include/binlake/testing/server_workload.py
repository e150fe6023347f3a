"""A paced write workload that runs inside the server, for benchmarks that need a high steady rate.

:class:`~binlake.testing.workload.Workload` sends every statement from Python; on a 2-core machine
that also runs the stream it reaches a few thousand changes/s. This one is a stored procedure: one
``CALL`` runs transactions of ten row changes (five inserts, three updates, two deletes) until its
time is up, paced against its start time, so the client costs nothing while it runs and the
server's own work is all the load costs — what the source server of a production stream pays.

Rows it writes: ids from above the table's largest up, five per transaction; each transaction
updates three rows written 60 transactions earlier and deletes two written 120 transactions earlier
(the table grows by three rows a transaction). Once 120 transactions ran — from the first one, if
the table held 600 consecutive ids to begin with — every change touches a row that exists.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from binlake.testing.workload import Connect

#: Row changes per transaction: inserts, updates, deletes.
INSERTS, UPDATES, DELETES = 5, 3, 2

#: The table the procedure writes (``{table}``, database-qualified).
TABLE = """CREATE TABLE IF NOT EXISTS {table} (
  id BIGINT PRIMARY KEY, customer_id INT NOT NULL, amount DECIMAL(12,2) NOT NULL,
  status VARCHAR(16) NOT NULL, note VARCHAR(200), created_at DATETIME(6) NOT NULL)"""

# SYSDATE(6), not NOW(6): inside a routine NOW() can stand still at the CALL's start.
_PROCEDURE = """CREATE OR REPLACE PROCEDURE {procedure}(
  IN rate DOUBLE, IN seconds DOUBLE, IN first_id BIGINT, OUT transactions BIGINT, OUT changed BIGINT)
BEGIN
  DECLARE started DOUBLE DEFAULT UNIX_TIMESTAMP(SYSDATE(6));
  DECLARE n, rows_changed BIGINT DEFAULT 0;
  DECLARE next_id BIGINT DEFAULT first_id;
  DECLARE ahead DOUBLE;
  WHILE UNIX_TIMESTAMP(SYSDATE(6)) - started < seconds DO
    START TRANSACTION;
    INSERT INTO {table} SELECT next_id + seq, (next_id + seq) % 5000, (next_id + seq) / 100, 'new',
      CONCAT(MD5(next_id + seq), MD5(next_id + seq + 1)), SYSDATE(6) FROM seq_0_to_{last_insert};
    SET rows_changed = rows_changed + ROW_COUNT();
    UPDATE {table} SET status = 'paid', amount = amount + 1
      WHERE id BETWEEN next_id - {update_back} AND next_id - {update_back} + {last_update};
    SET rows_changed = rows_changed + ROW_COUNT();
    DELETE FROM {table} WHERE id BETWEEN next_id - {delete_back} AND next_id - {delete_back} + {last_delete};
    SET rows_changed = rows_changed + ROW_COUNT();
    COMMIT;
    SET next_id = next_id + {inserts}, n = n + 1;
    -- Sleep only when 5 ms ahead: a sleep per transaction would cost more than the transaction.
    SET ahead = n * {changes} / rate - (UNIX_TIMESTAMP(SYSDATE(6)) - started);
    IF ahead > 0.005 THEN DO SLEEP(ahead); END IF;
  END WHILE;
  SET transactions = n, changed = rows_changed;
END"""


@dataclass
class ServerWorkloadStats:
    """What one run did: transactions committed, rows they changed (the server's count), time."""

    transactions: int
    total: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "transactions": self.transactions,
            "changes": self.total,
            "seconds": round(self.seconds, 3),
            "changes_per_s": round(self.total / self.seconds) if self.seconds else 0,
        }


@dataclass
class ServerWorkload:
    """Ten-row transactions at ``rate`` row changes/s into ``table``, run by the server itself.

    Args:
        connect: opens a connection with CREATE ROUTINE, EXECUTE and DML rights on the database.
        table: database-qualified table; created (empty) if missing, with the shape of ``TABLE``.
        rate: row changes per second (each transaction makes ten).
    """

    connect: Connect
    table: str
    rate: float
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _result: ServerWorkloadStats | None = field(default=None, init=False, repr=False)
    _error: BaseException | None = field(default=None, init=False, repr=False)

    @property
    def procedure(self) -> str:
        return f"{self.table.split('.')[0]}.binlake_steady_load"

    def install(self) -> None:
        """Create the table (if missing) and the procedure."""
        body = _PROCEDURE.format(
            procedure=self.procedure,
            table=self.table,
            last_insert=INSERTS - 1,
            update_back=60 * INSERTS,
            last_update=UPDATES - 1,
            delete_back=120 * INSERTS,
            last_delete=DELETES - 1,
            inserts=INSERTS,
            changes=INSERTS + UPDATES + DELETES,
        )
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(TABLE.format(table=self.table))
            cur.execute(body)

    def seed(self, rows: int) -> None:
        """Add ids 1..``rows`` to the (empty) table: from 600 on, every change of the first
        transaction hits a row (see the module docstring)."""
        database = self.table.split(".")[0]
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(f"USE `{database}`")  # seq_1_to_N: MariaDB's sequence engine, any database
            cur.execute(
                f"INSERT INTO {self.table} SELECT seq, seq % 5000, seq / 100, 'new', MD5(seq), "
                f"'2026-01-01' FROM seq_1_to_{rows}"
            )
            conn.commit()

    def run(self, seconds: float) -> ServerWorkloadStats:
        """One ``CALL`` for ``seconds``, in this thread; new ids start above the table's largest."""
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM {self.table}")
            first_id = int(cur.fetchone()[0])
            started = time.monotonic()
            cur.execute(
                f"CALL {self.procedure}(%s, %s, %s, @binlake_done, @binlake_changed)",
                (self.rate, seconds, first_id),
            )
            cur.execute("SELECT @binlake_done, @binlake_changed")
            done, changed = cur.fetchone()
            conn.commit()
        return ServerWorkloadStats(int(done), int(changed), time.monotonic() - started)

    def start(self, seconds: float) -> ServerWorkload:
        """:meth:`run` in a background thread; :meth:`join` waits for it and returns its stats."""

        def target() -> None:
            try:
                self._result = self.run(seconds)
            except BaseException as e:  # re-raised in join()
                self._error = e

        self._thread = threading.Thread(target=target, name="binlake-server-workload", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> ServerWorkloadStats:
        if self._thread is not None:
            self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise RuntimeError("the server workload has not finished")
        return self._result
