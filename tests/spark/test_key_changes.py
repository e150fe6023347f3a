"""Primary-key changes followed, and columns the server filled with the statement's own time, end
to end: a workload writing while the key changes (a key made wider, a keyless table given a key, a
key dropped) and a `DEFAULT NOW(6)` column is added, rows the new key allows that the old one did
not, a kill -9 before and after the changes are applied; then the sink equals the source through
pyiceberg and DuckDB, in both merge modes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import plan
from binlake.sink.catalog import open_catalog, sink_name
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.state.store import StateStore
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import assert_sink_equals_source, config_dict, kill_9_at, stream_config, write_config_file

pytestmark = pytest.mark.slow

SET_UP = [
    "CREATE TABLE acct (id INT PRIMARY KEY, tenant INT NOT NULL, v INT)",
    "INSERT INTO acct SELECT seq, seq % 3, seq FROM seq_1_to_300",
    "CREATE TABLE notes (id INT NOT NULL, body VARCHAR(20))",
    "INSERT INTO notes SELECT seq, CONCAT('n', seq) FROM seq_1_to_100",
    "CREATE TABLE loose (id INT PRIMARY KEY, v INT)",
    "INSERT INTO loose SELECT seq, seq FROM seq_1_to_50",
]
KEY_CHANGES = [
    "ALTER TABLE acct DROP PRIMARY KEY, ADD PRIMARY KEY (id, tenant)",
    "INSERT INTO acct VALUES (1, 7, -1), (2, 7, -2)",  # an id twice: the new key allows it
    "UPDATE acct SET v = v + 100 WHERE id = 1 AND tenant = 7",
    "DELETE FROM acct WHERE id = 2 AND tenant = 2",
    "ALTER TABLE notes ADD PRIMARY KEY (id)",
    "UPDATE notes SET body = 'changed' WHERE id <= 10",
    "DELETE FROM notes WHERE id BETWEEN 20 AND 25",
    # the statement's own time fills the rows the table held (issue 42, item 1), mid-workload
    "ALTER TABLE acct ADD COLUMN seen DATETIME(6) NOT NULL DEFAULT NOW(6), "
    "ADD COLUMN at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP",
    "ALTER TABLE loose DROP PRIMARY KEY",  # keyed → keyless
    "INSERT INTO loose VALUES (1, 1), (1, 1)",  # whole rows twice: a table without a key allows it
    "DELETE FROM loose WHERE id = 3",
    "UPDATE loose SET v = 0 WHERE id = 4",
]


def _config(mariadb: PrivateMariaDB, database: str, tmp_path: Path, mode: str) -> PipelineConfig:
    chunk_keys = {f"{database}.notes": "id", f"{database}.loose": "id"}
    config = stream_config(mariadb, database, tmp_path, chunk_size=100, chunk_key_columns=chunk_keys)
    raw = config_dict(config)
    raw["sink"]["table_properties"] = {"write.merge.mode": mode}
    return PipelineConfig.model_validate(raw)


def _identifiers(config: PipelineConfig, table: TableId) -> list[str]:
    schema = open_catalog(config).load_table(sink_name(config, table)).schema()
    return [schema.find_column_name(i) or "" for i in schema.identifier_field_ids]


def _workload(mariadb: PrivateMariaDB, database: str, stop: threading.Event, done: list[int]) -> None:
    """Writes that stay valid under both keys and every column added: updates by id, inserts of
    new ids naming their columns; ``done`` counts the rounds written."""
    n = 1000
    while not stop.is_set():
        n += 1
        mariadb.execute(
            f"INSERT INTO acct (id, tenant, v) VALUES ({n}, {n % 3}, {n})",
            f"UPDATE acct SET v = v + 1 WHERE id = {n % 300 + 1}",
            f"INSERT INTO notes (id, body) VALUES ({n}, 'w{n}')",
            database=database,
        )
        done.append(n)


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_primary_key_changes_under_a_workload_with_kills(
    mode: str, mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(*SET_UP, database=database)
    config = _config(mariadb, database, tmp_path, mode)
    plan(config)
    assert run_snapshot(config, spark).complete
    run_stream(config, spark, until_caught_up=True)
    stop = threading.Event()
    done: list[int] = []
    writer = threading.Thread(target=_workload, args=(mariadb, database, stop, done))
    writer.start()
    try:
        mariadb.execute(*KEY_CHANGES, database=database)
        path = write_config_file(tmp_path, config, mariadb)
        kill_9_at(path, "schema-before-apply")
        written = len(done)
        kill_9_at(path, "schema-after-apply")
    finally:
        stop.set()
        writer.join()
    # the workload wrote through every change and both kills (a failed write ends its thread)
    assert written > 0
    assert len(done) > written
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    assert _identifiers(config, TableId(database, "acct")) == ["id", "tenant"]
    assert _identifiers(config, TableId(database, "notes")) == ["id"]
    assert _identifiers(config, TableId(database, "loose")) == []
    with StateStore(config.pipeline.resolved_state_uri) as store:
        statuses = {r.status for r in store.schema_requests(config.pipeline.name).all()}
    assert statuses == {"applied"}
    mariadb.execute("UPDATE acct SET v = 0 WHERE tenant = 7", database=database)  # merges on the new key
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
