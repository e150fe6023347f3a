"""Tables kept without an upsert table (issue 43): a changelog alone, a history alone, or both. The
state table (the history, else the changelog) takes the snapshot's rows and the stream's changes
exactly once through kills between and after the commits and schema changes; replaying the
changelog, or the history's current versions, equals the source — through pyiceberg and DuckDB's
own reader — and so do the tables as of positions the source was seen at; verify and the quality
checks read the state."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from binlake.backfill.plan import KeyRange
from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import discover_tables, plan
from binlake.quality.checkpoint import run_quality
from binlake.sink.catalog import open_catalog, sink_name
from binlake.spark.backfill_job import run_backfill
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing import duckdb_iceberg
from binlake.testing.compare import bag, replay_changelog, source_rows
from binlake.testing.private_server import PrivateMariaDB
from binlake.verify.verification import verify
from tests.helpers import (
    Pause,
    as_of,
    assert_sink_equals_source,
    config_dict,
    in_session,
    kill_9_at,
    routed_config,
    stream_config,
    write_config_file,
)

pytestmark = pytest.mark.slow

SET_UP = [
    "CREATE TABLE orders (id INT PRIMARY KEY, tenant_id INT NOT NULL, note TEXT, total DECIMAL(10,2))",
    "INSERT INTO orders SELECT seq, seq % 7, CONCAT('note ', seq), seq / 4 FROM seq_1_to_300",
    "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20), qty INT NOT NULL)",
    "INSERT INTO items SELECT seq, CONCAT('item ', seq), seq FROM seq_1_to_200",
    "CREATE TABLE carts (id INT PRIMARY KEY, n INT)",
    "INSERT INTO carts SELECT seq, seq FROM seq_1_to_150",
    "CREATE TABLE visits (region VARCHAR(10), n INT)",  # no key: duplicates count
    "INSERT INTO visits SELECT ELT(1 + seq % 3, 'eu', 'us', NULL), seq % 50 FROM seq_1_to_120",
]


def _config(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, behavior: str = "lenient"
) -> PipelineConfig:
    config = stream_config(
        mariadb, database, tmp_path, chunk_size=100, chunk_key_columns={f"{database}.visits": "n"}
    )
    raw = config_dict(config)
    raw["pipeline"]["schema_change_behavior"] = behavior
    raw["sink"]["modes"] = [
        {"source_table": rf"{database}\.orders", "mode": ["changelog", "history"]},
        {"source_table": rf"{database}\.items", "mode": "history"},
        {"source_table": rf"{database}\.carts", "mode": "changelog", "changelog_updates": "after"},
        {"source_table": rf"{database}\.visits", "mode": "changelog"},
    ]
    return PipelineConfig.model_validate(raw)


def _table(config: PipelineConfig, database: str, table: str, kind: str) -> Any:
    return open_catalog(config).load_table(f"{sink_name(config, TableId(database, table))}_{kind}")


def _workload(
    mariadb: PrivateMariaDB, database: str, stop: threading.Event, done: list[int], pause: Pause
) -> None:
    """Inserts, updates (of the key too), deletes and transactions over all four tables; columns
    added, one with a value for the rows held (the server fills them without a row event)."""
    n = 10_000
    while not stop.is_set():
        pause.point()
        n += 1
        k = n % 300 + 1
        mariadb.execute(
            f"UPDATE orders SET total = total + 1, note = CONCAT(note, '+') WHERE id = {k}",
            f"UPDATE orders SET id = {n} WHERE id = {(k * 17) % 300 + 1}",
            f"DELETE FROM orders WHERE id = {(k * 13) % 300 + 1}",
            f"INSERT INTO orders (id, tenant_id, note, total) VALUES ({n + 100_000}, {n % 5}, NULL, 1)",
            "BEGIN",
            f"UPDATE items SET qty = qty + 1 WHERE id BETWEEN {k % 200} AND {k % 200 + 3}",
            f"UPDATE items SET id = {n} WHERE id = {(k * 7) % 200 + 1}",
            f"UPDATE carts SET n = n + 1 WHERE id = {k % 150 + 1}",
            f"UPDATE carts SET id = {n} WHERE id = {(k * 11) % 150 + 1}",
            f"UPDATE visits SET region = IF(region = 'eu', NULL, 'eu') WHERE n = {k % 50}",
            "COMMIT",
            f"DELETE FROM items WHERE id = {(k * 3) % 200 + 1}",
            f"DELETE FROM carts WHERE id = {(k * 5) % 150 + 1}",
            f"INSERT INTO visits (region, n) VALUES ('us', {k % 50})",
            f"DELETE FROM visits WHERE n = {(k * 3) % 50} LIMIT 1",
            database=database,
        )
        if n == 10_020:
            mariadb.execute(
                "ALTER TABLE orders ADD COLUMN seen INT",
                "ALTER TABLE items ADD COLUMN c INT NOT NULL DEFAULT 7",
                "ALTER TABLE carts ADD COLUMN d VARCHAR(5) DEFAULT 'x'",
                database=database,
            )
        if n > 10_020:
            mariadb.execute(f"UPDATE orders SET seen = {n} WHERE id = {k}", database=database)
        done.append(n)


def _source(config: PipelineConfig, table: str) -> Counter[Any]:
    (schema,) = [s for s in discover_tables(config) if s.table.table == table]
    return bag(source_rows(config, schema))


def _assert_replays_to_the_source(
    config: PipelineConfig, database: str, table: str, key: str | None = None
) -> Counter[str]:
    """The changelog's replay (pyiceberg's and DuckDB's reading) is the source's rows: signed, or
    each ``key``'s last change (a changelog of after images alone)."""
    changelog = _table(config, database, table, "changelog")
    expected = _source(config, table)
    columns = [name for name, _ in next(iter(expected))]
    rows = changelog.scan().to_arrow().to_pylist()
    duck = duckdb_iceberg.read(changelog).to_pylist()
    assert bag(duck) == bag(rows), "DuckDB reads the changelog differently"
    replay = replay_changelog if key is None else lambda found, names: _last_per_key(found, names, key)
    assert replay(rows, columns) == expected
    assert replay(duck, columns) == expected
    return Counter(r["__op__"] for r in rows)


def _last_per_key(rows: list[dict[str, Any]], columns: list[str], key: str) -> Counter[Any]:
    last: dict[Any, dict[str, Any]] = {}
    for change in sorted(rows, key=lambda r: (r["__position__"], r["__order__"])):
        last[change[key]] = change
    return bag([{c: r[c] for c in columns} for r in last.values() if r["__op__"] in ("+I", "+U")])


def _assert_history_is_the_source(config: PipelineConfig, database: str, table: str) -> None:
    history = _table(config, database, table, "history")
    expected = _source(config, table)
    columns = [name for name, _ in next(iter(expected))]
    current = history.scan(row_filter="__current__ == True").to_arrow()
    assert bag(current.select(columns).to_pylist()) == expected
    assert bag(duckdb_iceberg.read(history).to_pylist()) == bag(history.scan().to_arrow().to_pylist())


def test_changelog_and_history_alone_through_kills_and_schema_changes(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(*SET_UP, database=database)
    config = _config(mariadb, database, tmp_path)
    plan(config)
    assert run_snapshot(config, spark).complete
    catalog = open_catalog(config)
    sinks = {t: sink_name(config, TableId(database, t)) for t in ("orders", "items", "carts", "visits")}
    assert not any(catalog.table_exists(s) for s in sinks.values())  # no upsert table, anywhere
    reads = _table(config, database, "orders", "history").scan().to_arrow()
    assert reads.num_rows == 300
    assert set(reads.column("__current__").to_pylist()) == {True}
    reads = _table(config, database, "orders", "changelog").scan().to_arrow()
    assert Counter(
        zip(reads.column("__op__").to_pylist(), reads.column("__origin__").to_pylist(), strict=True)
    ) == {("+I", "snapshot"): 300}

    stop, pause = threading.Event(), Pause()
    done: list[int] = []
    states = []
    writer = threading.Thread(target=_workload, args=(mariadb, database, stop, done, pause))
    writer.start()
    try:
        path = write_config_file(tmp_path, config, mariadb)
        kill_9_at(path, "between-companions")  # the changelog committed, the history (the state) not
        states.append(pause.state(mariadb, config, ("orders", "items")))
        kill_9_at(path, "after-commit")
        states.append(pause.state(mariadb, config, ("orders", "items")))
        written = len(done)
    finally:
        stop.set()
        writer.join()
    assert written > 20  # the columns were added mid-stream
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)  # each table's state: replayed, or current versions

    assert set(_assert_replays_to_the_source(config, database, "orders")) == {"+I", "-U", "+U", "-D"}
    assert set(_assert_replays_to_the_source(config, database, "carts", "id")) == {"+I", "+U", "-D"}
    assert set(_assert_replays_to_the_source(config, database, "visits")) == {"+I", "-U", "+U", "-D"}
    for table in ("orders", "items"):
        _assert_history_is_the_source(config, database, table)
    filled = _table(config, database, "items", "history").scan(row_filter="__current__ == True").to_arrow()
    assert 7 in filled.column("c").to_pylist()  # the ADD COLUMN's value for the rows held then
    for position, rows in states:
        for table, kinds in (("orders", ("changelog", "history")), ("items", ("history",))):
            columns = [name for name, _ in next(iter(rows[table]))]
            for kind in kinds:
                assert as_of(_table(config, database, table, kind), position, columns, kind) == rows[table]
    assert not any(catalog.table_exists(s) for s in sinks.values())

    # verify compares each state (the history's current versions, a changelog's replay) and the
    # changelog kept beside a history.
    report = verify(config, "v1")
    checked = {t.sink: {v.status for v in t.verdicts} for t in report.tables}
    assert set(checked) == {
        f"{sinks['orders']}_history", f"{sinks['orders']}_changelog", f"{sinks['items']}_history",
        f"{sinks['carts']}_changelog", f"{sinks['visits']}_changelog",
    }  # fmt: skip
    assert set().union(*checked.values()) == {"equal"}
    quality = run_quality(config, run_name="q1")
    assert quality.success, quality.failures()
    assert {r.table for r in quality.results} == {
        f"{sinks['orders']}_history", f"{sinks['items']}_history", f"{sinks['carts']}_changelog",
        f"{sinks['visits']}_changelog",
    }  # fmt: skip

    # A run with nothing new appends nothing (a replayed batch is skipped).
    before = {
        t: _table(config, database, t, "changelog").scan().to_arrow().num_rows for t in ("orders", "carts")
    }
    run_stream(config, spark, until_caught_up=True)
    after = {
        t: _table(config, database, t, "changelog").scan().to_arrow().num_rows for t in ("orders", "carts")
    }
    assert after == before


def test_backfills_repairs_and_partial_images_without_an_upsert_table(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """A backfill brings the state to the source's rows in its ranges (the changelog's ``-D``/``+I``,
    the history's versions closed and opened) — here after rows went missing behind binlake's back;
    an update whose image lacks columns (MINIMAL) is completed from the state table."""
    mariadb.execute(*SET_UP, database=database)
    config = _config(mariadb, database, tmp_path, "evolve")
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute("UPDATE orders SET total = 0 WHERE id <= 10", database=database)
    run_stream(config, spark, until_caught_up=True)
    # Damage: the snapshot's reads of some keys gone from the state tables.
    _table(config, database, "orders", "changelog").delete(
        "id >= 40 and id < 60 and __origin__ == 'snapshot'"
    )
    _table(config, database, "items", "history").delete("id >= 40 and id < 60")
    report = verify(config, "v1")
    drifted = {t.sink for t in report.tables if any(v.status == "drifted" for v in t.verdicts)}
    assert drifted == {
        f"{sink_name(config, TableId(database, 'orders'))}_changelog",
        f"{sink_name(config, TableId(database, 'items'))}_history",
    }
    for table in ("orders", "items"):
        run_backfill(config, spark, f"b-{table}", tables=[f"{database}.{table}"], key_range=KeyRange(30, 70))
    run_stream(config, spark, until_caught_up=True)  # applies them
    assert {v.status for t in verify(config, "v2").tables for v in t.verdicts} == {"equal"}
    minimal = ["UPDATE orders SET total = total + 1 WHERE id = 85", "DELETE FROM orders WHERE id = 86",
               "UPDATE items SET qty = 0 WHERE id = 87", "UPDATE carts SET n = -1 WHERE id = 88"]  # fmt: skip
    in_session(mariadb, database, "SET SESSION binlog_row_image = 'MINIMAL'", *minimal)
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    _assert_replays_to_the_source(config, database, "orders")
    _assert_replays_to_the_source(config, database, "carts", "id")
    _assert_history_is_the_source(config, database, "orders")
    _assert_history_is_the_source(config, database, "items")
    rows = _table(config, database, "orders", "changelog").scan().to_arrow().to_pylist()
    minimal = {(r["__op__"], r["note"]) for r in rows if r["id"] in (85, 86) and r["__origin__"] == "binlog"}
    assert minimal >= {("-U", "note 85"), ("-D", "note 86")}  # whole images, completed from the state
    report = verify(config, "v3")
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}


def test_schema_changes_without_an_upsert_table(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Under ``evolve``: a dropped column stays (earlier rows hold it), a renamed one keeps its
    values, a widened type is widened; a TRUNCATE is ``-D`` of every row and every version
    closed; a table dropped and created again, one renamed, one created mid-stream — each state
    table follows, and the replay, the current versions and verify equal the source. A key
    change of a history kept alone is refused with the reason; a rename between names of which
    one keeps an upsert table and the other not, too."""
    mariadb.execute(*SET_UP[:6], database=database)
    raw = config_dict(_config(mariadb, database, tmp_path, "evolve"))
    raw["sink"]["modes"] = [
        {"source_table": rf"{database}\.(orders|items).*", "mode": ["changelog", "history"]},
        {"source_table": rf"{database}\.carts.*", "mode": "changelog"},
        {"source_table": rf"{database}\.kept", "mode": ["upsert", "changelog"]},
    ]
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "UPDATE orders SET note = 'before' WHERE id = 1",
        "ALTER TABLE orders DROP COLUMN total",
        "ALTER TABLE orders RENAME COLUMN note TO memo",
        "ALTER TABLE orders MODIFY tenant_id BIGINT NOT NULL",
        "UPDATE orders SET tenant_id = 3000000000, memo = 'after' WHERE id = 2",
        "TRUNCATE TABLE items",
        "INSERT INTO items VALUES (1, 'again', 1)",
        "DROP TABLE carts",
        "CREATE TABLE carts (id INT PRIMARY KEY, n INT, extra VARCHAR(3))",
        "INSERT INTO carts VALUES (1, 10, 'a'), (2, 20, NULL)",
        "CREATE TABLE carts_new LIKE carts",
        "INSERT INTO carts_new VALUES (7, 70, 'z')",
        "RENAME TABLE carts_new TO carts_2",
        "UPDATE carts_2 SET n = 71 WHERE id = 7",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    orders = _table(config, database, "orders", "changelog")
    assert {"total", "memo", "tenant_id"} <= set(orders.schema().column_names)
    assert "note" not in orders.schema().column_names  # renamed: its values came along
    _assert_replays_to_the_source(config, database, "orders")
    _assert_history_is_the_source(config, database, "orders")
    _assert_history_is_the_source(config, database, "items")
    items = _table(config, database, "items", "changelog").scan().to_arrow().to_pylist()
    assert Counter(r["__op__"] for r in items if r["__origin__"] == "binlog") == {"-D": 200, "+I": 1}
    for table in ("carts", "carts_2"):
        _assert_replays_to_the_source(config, database, table)
    catalog = open_catalog(config)
    namespace = sink_name(config, TableId(database, "orders")).rsplit(".", 1)[0]
    names = {t[-1] for t in catalog.list_tables(namespace)}
    assert names == {f"{t}_{k}" for t in ("orders", "items") for k in ("changelog", "history")} | {
        "carts_changelog", "carts_2_changelog",
    }  # fmt: skip
    report = verify(config, "v1")
    assert {t.table for t in report.tables} >= {f"{database}.carts_2"}
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}

    # A new key for a history kept alone: its versions could not be told apart; refused, named.
    mariadb.execute("ALTER TABLE items DROP PRIMARY KEY, ADD PRIMARY KEY (id, name)", database=database)
    with pytest.raises(Exception, match="keeps no upsert table to merge on the new one"):
        run_stream(config, spark, until_caught_up=True)


def test_routed_shards_and_a_transform_without_an_upsert_table(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Shards routed into one table kept as a changelog and a history alone (each row naming its
    shard, a shard created mid-stream, one truncated), and a transformed table kept as a changelog
    alone (a row leaving the filter is a ``-D``): each state equals the source through its route
    or its transform."""
    mariadb.execute(
        "CREATE TABLE orders_1 (id INT PRIMARY KEY, amount INT)",
        "CREATE TABLE orders_2 (id INT PRIMARY KEY, amount INT)",
        "INSERT INTO orders_1 SELECT seq, seq FROM seq_1_to_200",
        "INSERT INTO orders_2 SELECT seq, seq * 10 FROM seq_1_to_100",  # the same ids: keys collide
        "CREATE TABLE w (id INT PRIMARY KEY, note VARCHAR(20), n INT)",
        "INSERT INTO w SELECT seq, CONCAT('note ', seq), seq FROM seq_1_to_30",
        database=database,
    )
    raw = config_dict(
        routed_config(mariadb, database, tmp_path, ("changelog", "history"), upsert=False,
                      schema_change_behavior="evolve")
    )  # fmt: skip
    raw["transform"] = [
        {"source_table": rf"{database}\.w", "projection": "id, note, n * 2 AS twice", "filter": "n > 5"}
    ]
    raw["sink"]["modes"].append({"source_table": rf"{database}\.w", "mode": "changelog"})
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "UPDATE orders_1 SET amount = -1 WHERE id <= 10",
        "UPDATE orders_2 SET id = 500 WHERE id = 5",
        "DELETE FROM orders_2 WHERE id = 6",
        "CREATE TABLE orders_3 (id INT PRIMARY KEY, amount INT)",  # a new shard
        "INSERT INTO orders_3 VALUES (1, 1)",
        "TRUNCATE TABLE orders_2",
        "INSERT INTO orders_2 VALUES (1, 7)",
        "UPDATE w SET n = 1 WHERE id = 10",  # leaves the filter
        "UPDATE w SET n = 9 WHERE id = 3",  # comes in
        "UPDATE w SET note = 'x' WHERE id = 20",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    catalog = open_catalog(config)
    assert not catalog.table_exists("ods.orders")
    assert not catalog.table_exists(sink_name(config, TableId(database, "w")))
    assert_sink_equals_source(config)  # the shards' and the transform's states
    changelog, history = (catalog.load_table(f"ods.orders_{k}") for k in ("changelog", "history"))
    shards = {f"{database}.orders_{n}" for n in (1, 2, 3)}
    assert {r["_source_table"] for r in changelog.scan().to_arrow().to_pylist()} == shards
    current = history.scan(row_filter="__current__ == True").to_arrow().to_pylist()
    expected = Counter()
    for n in (1, 2, 3):
        (schema,) = [s for s in discover_tables(config) if s.table.table == f"orders_{n}"]
        expected += Counter(
            {(f"{database}.orders_{n}", r["id"], r["amount"]): 1 for r in source_rows(config, schema)}
        )
    assert Counter((r["_source_table"], r["id"], r["amount"]) for r in current) == expected
    columns = ["_source_table", "id", "amount"]
    assert replay_changelog(changelog.scan().to_arrow().to_pylist(), columns) == bag(
        [dict(zip(columns, key, strict=True)) for key in expected]
    )
    w = (
        catalog.load_table(sink_name(config, TableId(database, "w")) + "_changelog")
        .scan()
        .to_arrow()
        .to_pylist()
    )
    assert [(r["__op__"], r["id"]) for r in w if r["__origin__"] == "binlog" and r["id"] in (3, 10)] == [
        ("-D", 10), ("+I", 3),
    ]  # fmt: skip
    report = verify(config, "v1")
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}
