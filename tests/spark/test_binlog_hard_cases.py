"""The binlog's hard cases end to end: a workload running, the snapshot and the stream on Spark, then
the sink equal to the source — or, where binlake cannot replicate a change, a stop that names the
table, the position and the fix, with nothing of it written.

Real private MariaDB servers (with the settings each case needs), real Spark ``local[2]``, real
Iceberg; the MySQL-only forms (transaction payloads, partial JSON, binary JSON) are covered on
event bytes in ``tests/source``.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import discover_tables, plan
from binlake.sink.catalog import open_catalog, sink_name
from binlake.spark.backfill_job import run_backfill
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.state.offset_names import STREAM
from binlake.state.repair_ledger import RepairLedger
from binlake.state.store import StateStore
from binlake.stream.failover import BinlogChangedError
from binlake.stream.repairs import UnreplicableChangeError
from binlake.testing import demo
from binlake.testing.compare import bag, replay_changelog, sink_rows, source_rows
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from tests.conftest import ServerFactory
from tests.helpers import (
    assert_sink_equals_source,
    config_dict,
    hold_commit,
    kill_9_at,
    run_binlake,
    start_stream_process,
    stream_config,
    write_config_file,
)

pytestmark = pytest.mark.slow
#: Stop at a gap, for a person to repair (the default heals by itself: ``test_healing.py``).
STOP = {"on_gap": "stop"}


def _fresh(server: PrivateMariaDB, name: str) -> str:
    database = f"{name}_{uuid.uuid4().hex[:8]}"
    server.execute(f"CREATE DATABASE `{database}`")
    return database


def _prepare(server: PrivateMariaDB, database: str, xid: str, *statements: str) -> None:
    """An XA transaction prepared by a session that then disconnects (any session may decide it)."""
    with contextlib.closing(server.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute(f"XA START '{xid}'")
        for statement in statements:
            cur.execute(statement)
        cur.execute(f"XA END '{xid}'")
        cur.execute(f"XA PREPARE '{xid}'")
    time.sleep(0.1)


@contextlib.contextmanager
def _workload(server: PrivateMariaDB, database: str, rate: float = 150, **options: Any) -> Iterator[Workload]:
    workload = Workload(server.admin_connection, database=database, rate=rate, txn_size=2, **options).start()
    try:
        yield workload
    finally:
        workload.stop()


def _catch_up(config: PipelineConfig, spark: Any) -> None:
    run_stream(config, spark, until_caught_up=True)


# -- XA ------------------------------------------------------------------------------------------------


def test_xa_transactions_count_at_commit_in_snapshot_and_stream(
    mariadb: PrivateMariaDB, tmp_path: Path, spark: Any
) -> None:
    database = _fresh(mariadb, "xa")
    demo.load(mariadb.admin_connection, 2000, database=database)
    mariadb.execute(
        "CREATE TABLE ledger (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO ledger SELECT seq, 'start' FROM seq_1_to_600",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=150)
    # Prepared before any chunk's low watermark, committed after every SELECT: no snapshot read
    # can see it, and its rows belong after every chunk's high watermark.
    _prepare(
        mariadb, database, "snap", "UPDATE ledger SET v = 'snap' WHERE id <= 300",
        "DELETE FROM ledger WHERE id BETWEEN 500 AND 510", "INSERT INTO ledger VALUES (1000, 'snap')",
    )  # fmt: skip
    plan(config)
    with _workload(mariadb, database):
        assert run_snapshot(config, spark).complete
        mariadb.execute("XA COMMIT 'snap'", database=database)
        _prepare(mariadb, database, "rolled", "UPDATE ledger SET v = 'never' WHERE id > 300")
        _prepare(mariadb, database, "across", "INSERT INTO ledger VALUES (2000, 'across')")
        _catch_up(config, spark)  # the prepares are read; nothing of them may be applied yet
        assert not [
            r for r in sink_rows(config, TableId(database, "ledger")) if r["v"] in ("never", "across")
        ]
        mariadb.execute("FLUSH BINARY LOGS", "XA ROLLBACK 'rolled'", database=database)
        mariadb.execute("XA COMMIT 'across'", database=database)  # in a later file than its prepare
        _catch_up(config, spark)
    _catch_up(config, spark)
    assert_sink_equals_source(config)


def test_xa_commit_after_a_kill_9_between_prepare_and_commit(
    mariadb: PrivateMariaDB, tmp_path: Path, spark: Any
) -> None:
    database = _fresh(mariadb, "xak")
    mariadb.execute(
        "CREATE TABLE ledger (id INT PRIMARY KEY, v INT)",
        "INSERT INTO ledger SELECT seq, 0 FROM seq_1_to_300",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=100)
    path = write_config_file(tmp_path, config, mariadb)
    plan(config)
    assert run_snapshot(config, spark).complete
    _prepare(
        mariadb, database, "k", "UPDATE ledger SET v = 7 WHERE id <= 100", "DELETE FROM ledger WHERE id > 290"
    )
    mariadb.execute("UPDATE ledger SET v = 1 WHERE id BETWEEN 150 AND 200", database=database)  # unlocked
    kill_9_at(path, "after-commit")  # the batch with the prepare committed, then killed
    mariadb.execute("XA COMMIT 'k'", database=database)
    rerun = start_stream_process(path, None)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()
    assert_sink_equals_source(config)
    assert {r["v"] for r in sink_rows(config, TableId(database, "ledger")) if r["id"] <= 100} == {7}


# -- compressed events ------------------------------------------------------------------------------


def test_a_compressed_binlog_streams_and_corrects_chunks_exactly(
    mariadb_factory: ServerFactory, tmp_path: Path, spark: Any
) -> None:
    server = mariadb_factory(**{"log-bin-compress": "ON", "log-bin-compress-min-len": "10"})
    database = _fresh(server, "compressed")
    demo.load(server.admin_connection, 3000, database=database)
    config = stream_config(server, database, tmp_path, chunk_size=200)
    plan(config)
    with _workload(server, database, rate=250):
        assert run_snapshot(config, spark).complete  # chunks corrected from compressed events
        _catch_up(config, spark)
        server.execute(
            "ALTER TABLE customers ADD COLUMN tier VARCHAR(10)", database=database
        )  # compressed DDL
        server.execute("UPDATE customers SET tier = 'gold' WHERE id % 5 = 0", database=database)
        _catch_up(config, spark)
    _catch_up(config, spark)
    assert_sink_equals_source(config)


# -- row images without every column, rows logged as statements --------------------------------------


def _session(server: PrivateMariaDB, database: str, *settings: str) -> Any:
    conn = server.admin_connection(database)
    with conn.cursor() as cur:
        for setting in settings:
            cur.execute(setting)
    return conn


def test_noblob_and_minimal_images_keep_every_value(
    mariadb: PrivateMariaDB, tmp_path: Path, spark: Any
) -> None:
    database = _fresh(mariadb, "images")
    mariadb.execute(
        "CREATE TABLE docs (id INT PRIMARY KEY, title VARCHAR(40), body TEXT, n INT NOT NULL DEFAULT 7, "
        "tag VARCHAR(10) DEFAULT 'std', note TEXT)",
        "INSERT INTO docs SELECT seq, CONCAT('t', seq), REPEAT('body ', seq % 50), seq, 'old', NULL "
        "FROM seq_1_to_400",
        "CREATE TABLE views (page VARCHAR(20), body TEXT, KEY (page))",
        "INSERT INTO views SELECT CONCAT('p', seq % 30), REPEAT('v', seq % 7) FROM seq_1_to_200",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=100,
                           chunk_key_columns={f"{database}.views": "page"})  # fmt: skip
    plan(config)
    assert run_snapshot(config, spark).complete
    for image in ("NOBLOB", "MINIMAL"):
        conn = _session(mariadb, database, f"SET SESSION binlog_row_image = '{image}'")
        with contextlib.closing(conn), conn.cursor() as cur:
            cur.execute("UPDATE docs SET title = CONCAT(title, '!') WHERE id % 3 = 0")  # body not logged
            cur.execute("UPDATE docs SET n = n + 1 WHERE id % 3 = 0")  # twice in one batch
            cur.execute("UPDATE docs SET id = id + 1000 WHERE id BETWEEN 10 AND 15")  # key updates
            cur.execute("INSERT INTO docs (id, title) VALUES (5000, 'defaults')")  # n, tag, note: defaults
            cur.execute("UPDATE docs SET tag = 'new' WHERE id = 5000")  # a row of this batch
            cur.execute("DELETE FROM docs WHERE id % 17 = 0")
            cur.execute("UPDATE views SET body = 'changed' WHERE page = 'p3'")  # keyless: full images
            cur.execute("DELETE FROM views WHERE page = 'p4'")
            cur.execute("DELETE FROM docs WHERE id = 5000")
        _catch_up(config, spark)
        assert_sink_equals_source(config)


def test_rows_logged_as_statements_stop_the_stream_until_a_backfill(
    mariadb: PrivateMariaDB, tmp_path: Path, spark: Any
) -> None:
    database = _fresh(mariadb, "statements")
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, 0 FROM seq_1_to_500",
        "CREATE TABLE other (id INT PRIMARY KEY, v INT)",
        "INSERT INTO other SELECT seq, 0 FROM seq_1_to_50",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, STOP, chunk_size=100)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute("UPDATE t SET v = 1 WHERE id <= 10", "UPDATE other SET v = 1", database=database)
    conn = _session(mariadb, database, "SET SESSION binlog_format = 'STATEMENT'")
    with contextlib.closing(conn), conn.cursor() as cur:
        cur.execute("UPDATE t SET v = v + 100 WHERE id > 400")  # rows, as a statement
    mariadb.execute("UPDATE t SET v = 2 WHERE id <= 5", database=database)
    t = TableId(database, "t")
    with pytest.raises(UnreplicableChangeError) as stopped:
        _catch_up(config, spark)
    message = str(stopped.value)
    assert f"holds a change of `{t}`" in message
    assert "binlog_format" in message
    assert "SET SESSION binlog_format = 'ROW'" in message
    assert f"binlake backfill --table {t}" in message
    assert "nothing of the batch that holds it was written" in message
    assert {r["v"] for r in sink_rows(config, t)} == {0}  # as the last batch left it
    # The fix: a backfill read after the statement; the stream then passes it.
    run_backfill(config, spark, "repair", tables=[t.name])
    mariadb.execute("UPDATE t SET v = 3 WHERE id <= 3", database=database)
    _catch_up(config, spark)
    assert_sink_equals_source(config)
    store = StateStore(config.pipeline.resolved_state_uri)
    (repair,) = RepairLedger(store, "test").repairs(t)
    assert repair.status == "closed"
    assert repair.offset == stopped.value.gap.offset  # it began at the statement


def test_an_insert_without_a_value_binlake_cannot_know_stops_the_stream(
    mariadb: PrivateMariaDB, tmp_path: Path, spark: Any
) -> None:
    database = _fresh(mariadb, "defaults")
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, since DATE DEFAULT '2024-01-01', v INT DEFAULT 3)",
        "INSERT INTO t (id) SELECT seq FROM seq_1_to_50",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, STOP, chunk_size=100)
    plan(config)
    assert run_snapshot(config, spark).complete
    conn = _session(mariadb, database, "SET SESSION binlog_row_image = 'MINIMAL'")
    with contextlib.closing(conn), conn.cursor() as cur:
        cur.execute("INSERT INTO t (id) VALUES (100)")  # `since` and `v` not logged; `v`'s default is known
    with pytest.raises(UnreplicableChangeError, match=r"without a value for column `since`.*'2024-01-01'"):
        _catch_up(config, spark)
    assert 100 not in {r["id"] for r in sink_rows(config, TableId(database, "t"))}


# -- the watermark race, the keyless path ------------------------------------------------------------


def test_a_commit_semi_sync_holds_across_a_chunks_low_watermark_is_not_lost(
    mariadb_factory: ServerFactory, tmp_path: Path, spark: Any
) -> None:
    server = mariadb_factory(**{"rpl-semi-sync-master-wait-point": "AFTER_SYNC"})
    database = _fresh(server, "race")
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, 0 FROM seq_1_to_400",
        database=database,
    )
    config = stream_config(server, database, tmp_path, chunk_size=100)
    plan(config)
    # In the binlog before every chunk's low watermark, visible only after every SELECT.
    with hold_commit(server, f"UPDATE `{database}`.t SET v = 9 WHERE id % 2 = 0", hold_s=20):
        assert run_snapshot(config, spark).complete
    _catch_up(config, spark)
    assert_sink_equals_source(config)
    assert {r["v"] for r in sink_rows(config, TableId(database, "t")) if r["id"] % 2 == 0} == {9}


def test_keyless_tables_under_read_committed_with_floats_are_exact(
    mariadb_factory: ServerFactory, tmp_path: Path, spark: Any
) -> None:
    server = mariadb_factory(**{"transaction-isolation": "READ-COMMITTED"})
    database = _fresh(server, "keyless")
    server.execute(
        "CREATE TABLE readings (sensor INT, f FLOAT, note VARCHAR(10), KEY (sensor))",
        "INSERT INTO readings SELECT seq % 40, seq + 0.5678, 'a' FROM seq_1_to_800",
        database=database,
    )
    config = stream_config(server, database, tmp_path, chunk_size=100, select_reader="pymysql",
                           chunk_key_columns={f"{database}.readings": "sensor"})  # fmt: skip
    plan(config)
    stop = threading.Event()

    def writes() -> None:
        while not stop.is_set():
            server.execute(
                "INSERT INTO readings VALUES (7, 1234.5678, 'w'), (7, 1234.5678, 'w')",
                "DELETE FROM readings WHERE sensor = 7 LIMIT 1",
                database=database,
            )
            time.sleep(0.02)

    writer = threading.Thread(target=writes)
    writer.start()
    try:
        assert run_snapshot(config, spark).complete
    finally:
        stop.set()
        writer.join()
    server.execute("DELETE FROM readings WHERE f > 1234 AND f < 1235 LIMIT 3", database=database)
    _catch_up(config, spark)
    assert_sink_equals_source(config)  # floats compared as the stored floats


# -- foreign-key cascades ------------------------------------------------------------------------------


def test_cascading_foreign_keys_are_refused_before_anything_is_written(
    mariadb: PrivateMariaDB, tmp_path: Path, write_config: Any, spark: Any
) -> None:
    database = _fresh(mariadb, "cascade")
    mariadb.execute(
        "CREATE TABLE parents (id INT PRIMARY KEY)",
        "INSERT INTO parents SELECT seq FROM seq_1_to_20",
        "CREATE TABLE children (id INT PRIMARY KEY, parent INT, "
        "CONSTRAINT fk_parent FOREIGN KEY (parent) REFERENCES parents (id) ON DELETE CASCADE)",
        "INSERT INTO children SELECT seq, seq % 20 + 1 FROM seq_1_to_200",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=50)
    path = write_config_file(tmp_path, config, mariadb)
    result = run_binlake("--config", str(path), "plan")
    assert result.returncode != 0
    assert (
        f"`{database}.children` has `fk_parent` REFERENCES `{database}.parents` ON DELETE CASCADE"
        in result.output
    )
    assert "ON DELETE RESTRICT" in result.output
    assert "tables_exclude" in result.output
    assert (database,) not in open_catalog(config).list_namespaces()  # no sink table was created
    assert StateStore(config.pipeline.resolved_state_uri).plans("test").load() == []


def test_a_cascading_foreign_key_added_while_streaming_stops_the_stream(
    mariadb: PrivateMariaDB, tmp_path: Path, spark: Any
) -> None:
    database = _fresh(mariadb, "cascade_later")
    mariadb.execute(
        "CREATE TABLE parents (id INT PRIMARY KEY)",
        "INSERT INTO parents SELECT seq FROM seq_1_to_20",
        "CREATE TABLE children (id INT PRIMARY KEY, parent INT)",
        "INSERT INTO children SELECT seq, seq % 20 + 1 FROM seq_1_to_200",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, STOP, chunk_size=50)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "ALTER TABLE children ADD CONSTRAINT fk FOREIGN KEY (parent) REFERENCES parents (id) "
        "ON DELETE CASCADE",
        "DELETE FROM parents WHERE id = 3",  # deletes children the binlog does not show
        "ALTER TABLE children DROP FOREIGN KEY fk",  # gone again when the stream starts
        database=database,
    )
    with pytest.raises(
        UnreplicableChangeError, match=r"children.*ON DELETE/UPDATE CASCADE.*ON DELETE RESTRICT"
    ):
        _catch_up(config, spark)
    assert len(sink_rows(config, TableId(database, "children"))) == 200  # nothing of it written


# -- failover and binlog resets --------------------------------------------------------------------------


def test_failover_to_a_replica_resumes_by_gtid(tmp_path: Path, spark: Any) -> None:
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(_server(server_id=11))
        # Its own writes (its accounts at start) in a domain of their own, as a DBA sets a replica up.
        replica = stack.enter_context(
            _server(server_id=12, **{"log-slave-updates": "ON", "gtid-domain-id": "1"})
        )
        _replicate(primary, replica)
        database = "failover"
        # The primary's files numbered past the replica's: an offset of the old binlog is then
        # past every position of the new one, which any offset left unmoved would skip to.
        primary.execute(*["FLUSH BINARY LOGS"] * 4)
        primary.execute(f"CREATE DATABASE {database}")
        demo.load(primary.admin_connection, 1500, database=database)
        _caught_up(primary, replica)
        config = stream_config(primary, database, tmp_path, chunk_size=200)
        raw = config_dict(config)  # a changelog beside the upsert table, and one kept alone:
        raw["sink"]["modes"] = [  # their offsets are old positions too
            {"source_table": rf"{database}\.orders", "mode": ["upsert", "changelog"]},
            {"source_table": rf"{database}\.order_items", "mode": "changelog"},
        ]
        config = PipelineConfig.model_validate(raw)
        plan(config)
        with _workload(primary, database):
            assert run_snapshot(config, spark).complete
            _catch_up(config, spark)
        _caught_up(primary, replica)
        before = StateStore(config.pipeline.resolved_state_uri).offsets("test").load(STREAM)
        assert before is not None
        assert before.gtid
        primary.execute("FLUSH BINARY LOGS")  # the replica's files and positions differ anyway
        replica.execute("STOP SLAVE", "RESET SLAVE ALL")  # promoted
        primary.stop()
        moved = _pointed_at(config, replica, primary.password)
        with _workload(replica, database, seed=8, tables=("customers", "orders", "order_items")):
            time.sleep(3)
        report = run_stream(moved, spark, until_caught_up=True)
        assert "new binlog" in report.start_reason
        assert_sink_equals_source(moved)  # order_items: the state its changelog replays to
        # Every change once: what the changelog adds less what it removes is the source's rows.
        (orders,) = [s for s in discover_tables(moved) if s.table.table == "orders"]
        changelog = open_catalog(moved).load_table(sink_name(moved, orders.table) + "_changelog")
        changes = changelog.scan().to_arrow().to_pylist()
        columns = list(orders.column_names)
        added = bag([{c: r[c] for c in columns} for r in changes if r["__op__"] in ("+I", "+U")])
        removed = bag([{c: r[c] for c in columns} for r in changes if r["__op__"] in ("-U", "-D")])
        assert added - removed == bag(source_rows(moved, orders))
        assert not removed - added  # nothing removed that was not added
        # ... and in (position, order) it replays: the new binlog's positions sort after the old.
        assert replay_changelog(changes, columns) == bag(source_rows(moved, orders))
        assert {r["__binlog_file__"] for r in changes} >= {"binlog.000001", "binlog.000005"}


def test_a_reset_binlog_stops_the_stream_with_the_fix(
    mariadb_factory: ServerFactory, tmp_path: Path, spark: Any
) -> None:
    server = mariadb_factory(**{"server-id": "21"})  # a server of its own: the test resets its binlog
    database = _fresh(server, "reset")
    server.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)", database=database)
    config = stream_config(server, database, tmp_path, chunk_size=100)
    plan(config)
    assert run_snapshot(config, spark).complete
    server.execute("INSERT INTO t VALUES (2)", database=database)
    _catch_up(config, spark)
    server.execute("RESET MASTER")
    server.execute("INSERT INTO t VALUES (3)", database=database)
    with pytest.raises(BinlogChangedError, match=r"binlog was reset.*binlake plan --replan"):
        _catch_up(config, spark)


@contextlib.contextmanager
def _server(server_id: int, **options: str) -> Iterator[PrivateMariaDB]:
    server = PrivateMariaDB(server_id=server_id, options=options)
    try:
        yield server.start()
    finally:
        server.remove()


def _replicate(primary: PrivateMariaDB, replica: PrivateMariaDB) -> None:
    primary.create_user("repl", "repl", "REPLICATION SLAVE")
    replica.execute(
        f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='repl', "
        "MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos",
        "START SLAVE",
    )


def _caught_up(primary: PrivateMariaDB, replica: PrivateMariaDB, timeout: float = 60) -> None:
    wanted = primary.query("SELECT @@gtid_binlog_pos")[0][0]
    replica.query("SELECT MASTER_GTID_WAIT(%s, %s)", (wanted, timeout))


def _pointed_at(config: PipelineConfig, server: PrivateMariaDB, password: str) -> PipelineConfig:
    raw = config_dict(config)
    raw["source"]["port"] = server.port  # the accounts came over from the primary, passwords too
    return PipelineConfig.model_validate(raw)
