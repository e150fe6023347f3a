"""validate refuses replica ids another replica connected to the server uses, naming it: binlake's
readers register as `binlake:<pipeline>`, so its own are told apart from another pipeline's."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pymysqlreplication import BinLogStreamReader

from binlake.config import PipelineConfig, SourceConfig
from binlake.events import TableId, table_to_dict
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.binlog.scan import connection_settings
from binlake.source.server.connection import connect
from binlake.source.server.discovery import discover
from binlake.source.server.replicas import HeldReplicaId, claimed_server_id
from binlake.source.server.validator import validate
from binlake.spark import stream_task
from binlake.stream.positions import segment_ids
from binlake.stream.records import ENVELOPE_SCHEMA, table_changes
from binlake.testing.private_server import CDC_USER_PRIVILEGES, PrivateMariaDB
from tests.helpers import binlog_range, pipeline_dict


@contextlib.contextmanager
def _replica(
    mariadb: PrivateMariaDB, database: str, config: PipelineConfig, server_id: int, label: str
) -> Iterator[None]:
    """A binlog reader connected as replica ``server_id``, registered as ``label``; once closed,
    gone from the server's list (its dump thread notices at the next event it sends)."""
    reader = BinLogStreamReader(
        connection_settings=connection_settings(config.source), server_id=server_id, blocking=True,
        report_slave=label, enable_logging=False,
    )  # fmt: skip
    reader.fetchone()  # connected, registered: the dump's first event came
    try:
        yield
    finally:
        reader.close()
        for n in range(100):
            if server_id not in {row[0] for row in mariadb.query("SHOW SLAVE HOSTS")}:
                break
            mariadb.execute(
                f"INSERT INTO t VALUES ({server_id * 1000 + n})", database=config.source.tables[0][:-4]
            )
            time.sleep(0.05)


def _checks(config: PipelineConfig) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.message) for c in validate(config)}


def test_a_replica_id_in_use_by_another_pipeline_or_replica_is_refused_naming_it(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=database)
    least = PipelineConfig.model_validate(pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path))
    status, message = _checks(least)["replica_ids"]  # the least-privilege user may not list them
    assert (status, "`SHOW SLAVE HOSTS` was refused" in message) == ("warning", True)
    mariadb.create_user("binlake_lister", "lister-pw", f"{CDC_USER_PRIVILEGES}, REPLICATION MASTER ADMIN")
    raw = pipeline_dict(
        mariadb,
        [rf"{database}\..*"],
        tmp_path,
        user="binlake_lister",
        password="lister-pw",
        server_id="7400-7404",
    )
    config = PipelineConfig.model_validate(raw)
    assert config.source.replica_label == "binlake:test"
    assert _checks(config)["replica_ids"][0] == "ok", _checks(config)["replica_ids"]
    with _replica(mariadb, database, config, 7402, "binlake:test"):  # this pipeline's own reader: fine
        assert _checks(config)["replica_ids"][0] == "ok"
    with (
        _replica(mariadb, database, config, 7401, "binlake:orders"),
        _replica(mariadb, database, config, 7405, "db-replica-2"),
    ):
        status, message = _checks(config)["replica_ids"]
    assert status == "error"
    assert "id 7401 by the binlake pipeline `orders`; id 7405 by a replica at `db-replica-2`" in message
    with _replica(mariadb, database, config, 7300, "binlake:orders"):  # outside every id of this pipeline
        assert _checks(config)["replica_ids"][0] == "ok"


def test_concurrent_chunk_readers_claim_distinct_replica_ids_and_wait_when_all_are_held(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    """Spark may run more snapshot tasks at once than ``source.server_id`` holds ids: each claims
    one no other holds (its preferred one, else the next free), or waits until one is freed."""
    config = PipelineConfig.model_validate(pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path))
    source = config.source
    with contextlib.ExitStack() as held, contextlib.ExitStack() as last:
        first = held.enter_context(claimed_server_id(source, 7600, 7602, 0))
        second = held.enter_context(claimed_server_id(source, 7600, 7602, 4))  # 4 % 3: 7601
        third = last.enter_context(claimed_server_id(source, 7600, 7602, 1))  # 7601 held: the next
        assert (first, second, third) == (7600, 7601, 7602)
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(lambda: _claim_and_release(source, preferred=3))  # 3 % 3: 7600
            time.sleep(1.5)
            assert not waiting.done(), "a fourth reader took an id three others hold"
            last.close()  # the third reader ends: its connection, and lock, are gone
            assert waiting.result(timeout=30) == 7602, "the freed id, not the preferred one still held"
    with claimed_server_id(source, 7600, 7602, 2) as again:  # all released: the preferred one
        assert again == 7602


def test_a_claimed_id_stays_held_while_its_connection_idles_past_the_servers_wait_timeout(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    """The stream holds its planning id for as long as it runs, on a connection that does nothing
    else: the server's ``wait_timeout`` (often minutes in production) must not close it and free
    the id for a chunk reader to take."""
    config = PipelineConfig.model_validate(pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path))
    (default,) = mariadb.query("SELECT @@GLOBAL.wait_timeout")[0]
    mariadb.execute("SET GLOBAL wait_timeout = 1")  # sessions opened from now on idle out in 1 s
    try:
        with claimed_server_id(config.source, 7650, 7651, 0, wait=False) as claimed:
            time.sleep(3)
            holder = mariadb.query("SELECT IS_USED_LOCK(%s)", (f"binlake:replica_id:{claimed}",))[0][0]
            assert holder is not None, "the claim's connection idled out and its id was freed"
    finally:
        mariadb.execute(f"SET GLOBAL wait_timeout = {int(default)}")


def test_the_streams_planning_id_is_claimed_again_once_its_connection_is_lost(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server restart or a network cut ends the connection that holds the stream's planning id,
    and the server frees the id with it: the next batch's renewal claims it again (a ping while the
    connection lives). Held by another reader by then, the stream goes on with a warning and claims
    it once freed; with the server out of reach, it goes on and claims it at a later renewal."""
    config = PipelineConfig.model_validate(pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path))
    lock = "binlake:replica_id:7660"

    def holder() -> int | None:
        found = mariadb.query("SELECT IS_USED_LOCK(%s)", (lock,))[0][0]
        return None if found is None else int(found)

    with HeldReplicaId(config.source, 7660) as planning:
        first = holder()
        assert first is not None
        planning.renew()  # alive: the same connection holds it
        assert holder() == first
        mariadb.execute(f"KILL {first}")
        _wait_until(lambda: holder() is None)
        assert holder() is None, "the killed connection's lock outlived it"
        planning.renew()
        again = holder()
        assert again is not None, "the id was not claimed again"
        assert again != first
        mariadb.execute(f"KILL {again}")
        with claimed_server_id(config.source, 7660, 7660, 0, wait=False), caplog.at_level(logging.WARNING):
            planning.renew()  # a chunk reader took the freed id meanwhile
            assert "replica id 7660 is held by another reader" in caplog.text
            reader = holder()
        _wait_until(lambda: holder() is None)  # the chunk reader is done
        planning.renew()  # and the next renewal claims the id
        assert holder() not in (None, reader, again)
        # The server out of reach at a renewal (restarting): the stream goes on, and the next
        # renewal claims the id.
        mariadb.execute(f"KILL {holder()}")
        reachable = planning.source
        planning.source = reachable.model_copy(update={"port": _closed_port()})
        with caplog.at_level(logging.WARNING):
            planning.renew()
        assert "replica id 7660 cannot be claimed again now" in caplog.text
        planning.source = reachable
        planning.renew()
        assert holder() is not None


def _wait_until(done: Callable[[], bool]) -> None:
    for _ in range(50):
        if done():
            return
        time.sleep(0.1)


def _closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _claim_and_release(source: SourceConfig, preferred: int) -> int:
    with claimed_server_id(source, 7600, 7602, preferred) as server_id:
        return server_id


def test_a_stream_segment_reader_claims_an_id_a_snapshot_reader_does_not_hold_and_never_waits(
    mariadb: PrivateMariaDB,
    database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A snapshot's chunk readers and the stream's segment readers take ids from one range: a
    segment reader claims a free one of the segment ids (all but the planning side's last one).
    When every one is held it reads with its own all the same, saying so: a paused process of the
    pipeline (a stream that lost its lease while stopped) may hold them for hours, and the stream
    that took over must not wait for it."""
    start, end = binlog_range(
        mariadb, database, ["CREATE TABLE t (id INT PRIMARY KEY)"], ["INSERT INTO t VALUES (1), (2)"]
    )
    raw = pipeline_dict(mariadb, [rf"{database}\.t"], tmp_path, server_id="7700-7702")
    config = PipelineConfig.model_validate(raw)
    with contextlib.closing(connect(config.source)) as conn:
        (schema,) = discover(conn, [TableId(database, "t")])
    tables = json.dumps({schema.table.name: table_to_dict(schema)})
    assert segment_ids(config.source) == (7700, 7701)
    used: list[int] = []

    def reader(source: SourceConfig, server_id: int, *args: Any, **kwargs: Any) -> BinlogReader:
        used.append(server_id)
        return BinlogReader(source, server_id, *args, **kwargs)

    monkeypatch.setattr(stream_task, "BinlogReader", reader)

    def read() -> list[str]:
        batches = list(stream_task.read_segment(config, 0, start.to_dict(), end.to_dict(), tables))
        ops = table_changes(pa.Table.from_batches(batches, schema=ENVELOPE_SCHEMA))[schema.table.name]["op"]
        return list(ops.to_pylist())

    with claimed_server_id(config.source, 7700, 7701, 0):  # a chunk reader holds index 0's id
        assert read() == ["insert", "insert"]
    assert used == [7701]
    with contextlib.ExitStack() as held, caplog.at_level(logging.WARNING):
        for preferred in (0, 1):  # both segment ids held
            held.enter_context(claimed_server_id(config.source, 7700, 7701, preferred))
        with ThreadPoolExecutor(1) as pool:
            assert pool.submit(read).result(timeout=60) == ["insert", "insert"]
    assert used == [7701, 7700]
    assert "replica ids 7700-7701 are all held by other readers" in caplog.text
