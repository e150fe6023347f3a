"""The stream's lag in bytes on a real server: what the server writes between transactions after
the stream's last batch (a rotation, a format description, a GTID list, a binlog checkpoint) is no
lag; a transaction is."""

from __future__ import annotations

from binlake.offsets import BinlogOffset
from binlake.stream.metrics import source_behind
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import source_config


def test_housekeeping_after_the_last_transaction_is_no_lag(mariadb: PrivateMariaDB, database: str) -> None:
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)", database=database)
    file, pos = mariadb.query("SHOW MASTER STATUS")[0][:2]
    applied = BinlogOffset(str(file), int(pos))  # where a stream that applied the insert stands
    source = source_config(mariadb, database)
    mariadb.execute("FLUSH BINARY LOGS")  # a rotation; the new file opens with housekeeping events
    head_file = mariadb.query("SHOW MASTER STATUS")[0][0]
    assert head_file != file
    assert source_behind(source, lambda: applied) == (0, applied)
    mariadb.execute("INSERT INTO t VALUES (2)", database=database)
    behind, _ = source_behind(source, lambda: applied)
    assert behind is not None
    assert behind > 0  # a transaction to apply
