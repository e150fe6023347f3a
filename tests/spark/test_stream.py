"""The binlog stream on Spark: exact after the snapshot, exactly once, every startup mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from binlake.config import PipelineConfig
from binlake.planner import discover_tables, plan
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing.private_server import PrivateMariaDB
from tests.spark.test_snapshot import bag, config_for, sink_rows, source_rows


def stream_config(server: PrivateMariaDB, database: str, tmp_path: Path, **source: Any) -> PipelineConfig:
    config = config_for(server, database, tmp_path, **source)
    raw = config.model_dump(mode="json")
    raw["source"]["password"] = server.password
    raw["source"]["startup_mode"] = source.get("startup_mode", "initial")
    raw["stream"] = {"trigger_interval_s": 1, "segment_bytes": 4096}
    return PipelineConfig.model_validate(raw)


def assert_sink_equals_source(config: PipelineConfig) -> None:
    for schema in discover_tables(config):
        assert bag(sink_rows(config, schema.table)) == bag(source_rows(config, schema)), schema.table


def test_stream_after_snapshot_is_exact(mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL(10,2))",
        "INSERT INTO t SELECT seq, CONCAT('v', seq), seq / 7 FROM seq_1_to_500",
        "CREATE TABLE page_views (customer_id INT, b VARCHAR(10))",
        "INSERT INTO page_views VALUES (1, 'x'), (1, 'x'), (2, 'y'), (NULL, 'n')",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=100)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "INSERT INTO t SELECT seq, 'new', 1.5 FROM seq_501_to_800",
        "UPDATE t SET v = 'upd' WHERE id % 3 = 0",
        "DELETE FROM t WHERE id % 10 = 0",
        "UPDATE t SET id = id + 10000 WHERE id BETWEEN 41 AND 45",
        "INSERT INTO t VALUES (10, 'back', 0)",
        "DELETE FROM page_views WHERE customer_id = 1 LIMIT 1",
        "INSERT INTO page_views VALUES (3, 'z'), (3, 'z'), (NULL, 'n')",
        "UPDATE page_views SET b = 'w' WHERE customer_id = 2",
        database=database,
    )
    report = run_stream(config, spark, until_caught_up=True)
    assert report.batches >= 1
    assert_sink_equals_source(config)
