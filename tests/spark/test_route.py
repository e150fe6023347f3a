"""Route: sharded source tables merged into one sink table, with a column added to one shard."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from binlake.backfill.plan import KeyRange
from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import plan
from binlake.sink.catalog import open_catalog
from binlake.spark.backfill_job import run_backfill
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing.compare import bag, replay_changelog, sink_rows
from binlake.testing.private_server import PrivateMariaDB
from binlake.verify.verification import verify
from tests.helpers import assert_sink_equals_source, config_dict, routed_config, stream_config

pytestmark = pytest.mark.slow


def test_shards_merge_into_one_table_and_a_column_added_to_one_shard_appears(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE orders_1 (id INT PRIMARY KEY, amount INT)",
        "CREATE TABLE orders_2 (id INT PRIMARY KEY, amount INT)",
        "INSERT INTO orders_1 SELECT seq, seq FROM seq_1_to_500",
        "INSERT INTO orders_2 SELECT seq, seq * 10 FROM seq_1_to_300",  # the same ids: keys collide
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=200)
    raw = config_dict(config)
    raw["route"] = [{"source_table": rf"{database}\.orders_[0-9]+", "sink_table": "ods.orders"}]
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "UPDATE orders_1 SET amount = -1 WHERE id <= 10",
        "ALTER TABLE orders_2 ADD COLUMN note VARCHAR(10)",
        "INSERT INTO orders_2 VALUES (1000, 1, 'new')",
        "UPDATE orders_2 SET note = 'old' WHERE id = 5",
        "DELETE FROM orders_2 WHERE id = 6",
        "DELETE FROM orders_1 WHERE id = 7",
        "CREATE TABLE orders_3 (id INT PRIMARY KEY, amount INT, extra INT)",  # a new shard
        "INSERT INTO orders_3 VALUES (1, 1, 1)",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)  # each shard's rows, told apart by _source_table
    merged = open_catalog(config).load_table("ods.orders")
    assert [f.name for f in merged.schema().fields] == ["_source_table", "id", "amount", "note", "extra"]
    rows = sink_rows(config, TableId(database, "orders_1"))  # the whole merged table
    assert len(rows) == 499 + 299 + 1 + 1
    by_key = {(r["_source_table"], r["id"]): r for r in rows}
    assert by_key[(f"{database}.orders_1", 5)]["note"] is None
    assert by_key[(f"{database}.orders_2", 5)]["note"] == "old"
    assert by_key[(f"{database}.orders_3", 1)]["extra"] == 1

    # A backfill of one shard's key range replaces that shard's rows only (the others share keys).
    merged.delete(f"_source_table == '{database}.orders_2' and id < 50")
    run_backfill(config, spark, "shard", tables=[f"{database}.orders_2"], key_range=KeyRange(1, 100))
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)


def test_a_column_each_shard_adds_with_its_default_fills_that_shards_rows(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """The first shard's ``ADD COLUMN … DEFAULT`` adds the column to the merged table and fills its
    rows; the second's finds the column there and fills its own rows with its own default (it
    left them NULL, silently: verify found the table drifted) — in the changelog and history too."""
    mariadb.execute(
        "CREATE TABLE orders_1 (id INT PRIMARY KEY, amount INT)",
        "CREATE TABLE orders_2 (id INT PRIMARY KEY, amount INT)",
        "INSERT INTO orders_1 SELECT seq, seq FROM seq_1_to_200",
        "INSERT INTO orders_2 SELECT seq, seq * 10 FROM seq_1_to_100",
        database=database,
    )
    config = routed_config(mariadb, database, tmp_path, ("changelog", "history"))
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "ALTER TABLE orders_1 ADD COLUMN c INT NOT NULL DEFAULT 7",
        "UPDATE orders_1 SET amount = 0 WHERE id = 3",
        "ALTER TABLE orders_2 ADD COLUMN c INT NOT NULL DEFAULT 9",
        "UPDATE orders_2 SET c = 1 WHERE id = 4",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    catalog = open_catalog(config)
    rows = catalog.load_table("ods.orders").scan().to_arrow().to_pylist()
    assert Counter((r["_source_table"].rsplit(".", 1)[1], r["c"]) for r in rows) == {
        ("orders_1", 7): 200,
        ("orders_2", 9): 99,
        ("orders_2", 1): 1,
    }
    _assert_companions_and_verify(
        config, [f.name for f in catalog.load_table("ods.orders").schema().fields], rows
    )


def test_a_shards_truncate_or_drop_removes_its_own_rows_from_the_shared_table(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Under ``evolve`` a shard's TRUNCATE or DROP removes that shard's rows from the table the
    shards share (marked deleted with soft deletes, ``-D`` in the changelog, versions closed in the
    history) and no other shard's: before, the shared table kept them, with an info line."""
    mariadb.execute(
        *(f"CREATE TABLE orders_{n} (id INT PRIMARY KEY, amount INT)" for n in (1, 2, 3)),
        "INSERT INTO orders_1 SELECT seq, seq FROM seq_1_to_200",
        "INSERT INTO orders_2 SELECT seq, seq * 10 FROM seq_1_to_100",
        "INSERT INTO orders_3 SELECT seq, seq * 100 FROM seq_1_to_50",
        database=database,
    )
    modes = ("changelog", "history", "soft_delete")
    config = routed_config(mariadb, database, tmp_path, modes, schema_change_behavior="evolve")
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "TRUNCATE TABLE orders_1",
        "INSERT INTO orders_1 VALUES (5, 5)",
        "DROP TABLE orders_3",
        "UPDATE orders_2 SET amount = 0 WHERE id = 7",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    catalog = open_catalog(config)
    stored = catalog.load_table("ods.orders").scan().to_arrow().to_pylist()
    rows = [r for r in stored if not r["__deleted__"]]
    assert Counter(r["_source_table"].rsplit(".", 1)[1] for r in rows) == {"orders_1": 1, "orders_2": 100}
    assert Counter(r["_source_table"].rsplit(".", 1)[1] for r in stored if r["__deleted__"]) == {
        "orders_1": 199,  # 5 inserted again: live again
        "orders_3": 50,
    }
    changelog = _assert_companions_and_verify(config, ["_source_table", "id", "amount"], rows)
    assert Counter(r["_source_table"].rsplit(".", 1)[1] for r in changelog if r["__op__"] == "-D") == {
        "orders_1": 200,
        "orders_3": 50,
    }


def _assert_companions_and_verify(
    config: PipelineConfig, columns: list[str], rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The shared table's changelog replays to ``rows`` (its live rows, in ``columns``), its history's
    current versions are they, and verify finds every table equal; returns the changelog's rows."""
    catalog = open_catalog(config)
    live = bag([{c: r[c] for c in columns} for r in rows])
    changelog = catalog.load_table("ods.orders_changelog").scan().to_arrow().to_pylist()
    assert replay_changelog(changelog, columns) == live
    history = catalog.load_table("ods.orders_history").scan(row_filter="__current__ == True").to_arrow()
    assert bag(history.select(columns).to_pylist()) == live
    report = verify(config, "v1")
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}
    return changelog
