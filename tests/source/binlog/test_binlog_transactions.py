"""Transaction boundaries found without decoding rows, and resuming a reader at them."""

from __future__ import annotations

import contextlib

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.planner import discover_tables
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.binlog.scan import transactions
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import server_version
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import pipeline_dict, source_config


def test_boundaries_are_the_positions_after_each_commit(mariadb: PrivateMariaDB, database: str) -> None:
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v TEXT)", database=database)
    config = PipelineConfig.model_validate(pipeline_dict(mariadb, [rf"{database}\..*"], "."))
    (schema,) = discover_tables(config)  # before the ALTER below: the rows read were written so
    statements = [
        "INSERT INTO t VALUES (1, 'a')",
        "INSERT INTO t SELECT seq, REPEAT('x', 500) FROM seq_2_to_3000",  # many row events
        "ALTER TABLE t ADD COLUMN w INT",  # a standalone statement
        "UPDATE t SET w = 1 WHERE id < 10",
    ]
    expected = []
    with contextlib.closing(mariadb.admin_connection()) as conn, conn.cursor() as cur:
        version = server_version(conn)
        # a fresh binlog file: the session's server rotates at 16 MB, and a rotation right after a
        # commit makes SHOW MASTER STATUS race the reader (the end of one file, or the start of the next)
        cur.execute("FLUSH BINARY LOGS")
        cur.execute(f"USE `{database}`")
        start = current_offset(conn, version)
        for statement in statements:
            cur.execute(statement)
            conn.commit()
            at = current_offset(conn, version)
            expected.append(BinlogOffset(at.file, at.pos))
    source = source_config(mariadb, database)
    found = list(transactions(source, 6101, start, expected[-1]))
    assert [b.offset for b in found] == expected
    assert all(b.gtid for b in found)  # MariaDB writes a GTID for every transaction

    # A reader started at a boundary sees exactly the rows after it, up to the next one.
    converter = RowConverter(schema)
    table = TableId(database, "t")
    rows = list(
        BinlogReader(source, 6102, found[0].offset, found[1].offset, {table}, lambda _: converter).rows()
    )
    assert len(rows) == 2999
    assert {r.op for r in rows} == {"insert"}
    assert sorted(r.after[0] for r in rows if r.after) == list(range(2, 3001))


def test_a_create_select_logged_as_a_transaction_ends_with_its_create(
    mariadb: PrivateMariaDB, database: str
) -> None:
    """MariaDB logs ``CREATE TABLE … SELECT`` as a transaction: the table's ``CREATE``, then its
    rows. Its boundary carries the ``CREATE`` (a statement with rows inside), where the scan used
    to see no statement at all (the stream never created the table)."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)", database=database)
    with contextlib.closing(mariadb.admin_connection()) as conn, conn.cursor() as cur:
        version = server_version(conn)
        cur.execute("FLUSH BINARY LOGS")
        start = current_offset(conn, version)
        cur.execute(f"USE `{database}`")
        cur.execute("CREATE TABLE copy AS SELECT * FROM t")
        cur.execute("ALTER TABLE copy ADD COLUMN v INT")
        conn.commit()
        end = current_offset(conn, version)
    found = list(transactions(source_config(mariadb, database), 6103, start, BinlogOffset(end.file, end.pos)))
    statements = [(b.statement.split("(")[0].strip(), b.with_rows, b.database) for b in found if b.statement]
    assert statements == [
        ("CREATE TABLE `copy`", True, database),
        ("ALTER TABLE copy ADD COLUMN v INT", False, database),
    ]
