"""The server-side steady workload: paced, ten row changes per transaction, every change real."""

from __future__ import annotations

from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlake.offsets import BinlogOffset
from binlake.source.binlog.scan import open_stream
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.server_workload import ServerWorkload
from tests.helpers import source_config

SEEDED = 2000


def _rows_per_transaction(
    server: PrivateMariaDB, database: str, start: BinlogOffset, table: str
) -> list[int]:
    events = [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent]
    stream = open_stream(source_config(server, database), 7301, start, only_events=events)
    sizes, rows = [], 0
    try:
        for event in stream:
            if isinstance(event, XidEvent):
                sizes.append(rows)
                rows = 0
            elif f"{event.schema}.{event.table}" == table:
                rows += len(event.rows)
    finally:
        stream.close()
    return sizes


def test_paced_ten_row_transactions_that_each_change_ten_rows(mariadb: PrivateMariaDB, database: str) -> None:
    table, rate, seconds = f"{database}.steady", 2000.0, 1.5
    workload = ServerWorkload(mariadb.admin_connection, table, rate)
    workload.install()
    # Seeded below the first new id: from the first transaction on, every update and delete hits.
    workload.seed(SEEDED)
    file, pos = mariadb.query("SHOW MASTER STATUS")[0][:2]

    stats = workload.start(seconds).join(60)

    assert 0 < stats.transactions <= (seconds + 0.005) * rate / 10 + 1  # never ahead of its pace
    assert stats.total == 10 * stats.transactions
    assert mariadb.query(f"SELECT COUNT(*) FROM {table}") == [(SEEDED + 3 * stats.transactions,)]
    assert (
        _rows_per_transaction(mariadb, database, BinlogOffset(file, int(pos)), table)
        == [10] * stats.transactions
    )


def test_the_workload_runs_again_and_again_on_the_same_database(
    mariadb: PrivateMariaDB, database: str
) -> None:
    """Fresh keys each run: new coupon codes start past the highest any run made, not at the
    count of rows (which deletes lower), so a second run with the same seed collides with nothing."""
    from binlake.testing import demo
    from binlake.testing.workload import Workload

    demo.load(mariadb.admin_connection, 500, database=database)
    for _ in range(3):
        stats = Workload(mariadb.admin_connection, database=database, rate=0, seed=1).run(max_ops=1500)
        assert stats.total == 1500
