"""The changelog table (issue 43): every change as a row beside the upsert table, exactly once
through kills (before, between and after the two commits) and a schema change; replaying it in
(position, order) gives the upsert table's rows — which equal the source's — through pyiceberg and
through DuckDB's own reader."""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from binlake.backfill.plan import KeyRange
from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import plan
from binlake.sink.catalog import open_catalog, sink_name
from binlake.sink.history.changelog import METADATA
from binlake.spark.backfill_job import run_backfill
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing import duckdb_iceberg
from binlake.testing.compare import bag, replay_changelog
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
    raw["pipeline"]["schema_change_behavior"] = behavior  # `evolve` applies a TRUNCATE
    raw["sink"]["modes"] = [  # a table without a key has no versions to keep apart: no history
        {"source_table": rf"{database}\.orders", "mode": ["upsert", "changelog", "history"]},
        {"source_table": rf"{database}\.visits", "mode": ["upsert", "changelog"]},
    ]
    return PipelineConfig.model_validate(raw)


def _workload(
    mariadb: PrivateMariaDB, database: str, stop: threading.Event, done: list[int], pause: Pause
) -> None:
    """Inserts, updates (of the key too), deletes, a multi-row transaction, and a column added."""
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
            f"UPDATE orders SET tenant_id = tenant_id + 1 WHERE id BETWEEN {k} AND {k + 5}",
            f"UPDATE visits SET region = IF(region = 'eu', NULL, 'eu') WHERE n = {k % 50}",
            "COMMIT",
            f"INSERT INTO visits (region, n) VALUES ('us', {k % 50})",
            f"DELETE FROM visits WHERE n = {(k * 3) % 50} LIMIT 1",
            database=database,
        )
        if n == 10_030:
            mariadb.execute("ALTER TABLE orders ADD COLUMN seen INT", database=database)
        if n > 10_030:
            mariadb.execute(f"UPDATE orders SET seen = {n} WHERE id = {k}", database=database)
        done.append(n)


def _changelog(config: PipelineConfig, database: str, table: str) -> Any:
    return open_catalog(config).load_table(sink_name(config, TableId(database, table)) + "_changelog")


def _assert_replays_to_the_upsert_table(config: PipelineConfig, database: str, table: str) -> Counter[str]:
    catalog = open_catalog(config)
    upsert = catalog.load_table(sink_name(config, TableId(database, table)))
    changelog = _changelog(config, database, table)
    columns = upsert.schema().column_names
    expected = bag(upsert.scan().to_arrow().to_pylist())
    rows = changelog.scan().to_arrow().to_pylist()
    assert replay_changelog(rows, columns) == expected
    duck = duckdb_iceberg.read(changelog).to_pylist()
    assert bag(duck) == bag(rows), "DuckDB reads the changelog differently"
    assert replay_changelog(duck, columns) == expected
    return Counter(r["__op__"] for r in rows)


def _assert_gtids_are_the_servers(mariadb: PrivateMariaDB, rows: list[dict[str, Any]]) -> None:
    """Each binlog change carries its transaction's GTID as the server's binlog shows it: the last
    `Gtid` event before the change's rows event (`SHOW BINLOG EVENTS`); read rows carry none."""
    changes = [r for r in rows if r["__origin__"] == "binlog"]
    assert changes
    server: dict[tuple[str, int], str] = {}
    for file in sorted({r["__binlog_file__"] for r in changes}):
        gtid = None
        for _, _, kind, _, end, info in mariadb.query(f"SHOW BINLOG EVENTS IN '{file}'"):
            if kind == "Gtid":
                gtid = str(info).split("GTID ")[1].split()[0]
            server[(file, int(end))] = gtid
    found = {r["__gtid__"] == server[(r["__binlog_file__"], r["__binlog_pos__"])] for r in changes}
    assert found == {True}
    assert len({r["__gtid__"] for r in changes}) > 10  # many transactions, told apart
    assert {r["__gtid__"] for r in rows if r["__origin__"] == "snapshot"} == {None}


def _history(config: PipelineConfig, database: str, table: str = "orders") -> Any:
    return open_catalog(config).load_table(sink_name(config, TableId(database, table)) + "_history")


def _assert_versions_follow_each_other(history: Any) -> None:
    """Each key's versions: one after another, each closed where the next opens (or by a delete),
    only the last one current; DuckDB reads them as pyiceberg does."""
    rows = history.scan().to_arrow().to_pylist()
    assert bag(duckdb_iceberg.read(history).to_pylist()) == bag(rows)
    by_key: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault(row["id"], []).append(row)
    for versions in by_key.values():
        versions.sort(key=lambda v: (v["__opened_position__"], v["__opened_order__"]))
        for earlier, later in itertools.pairwise(versions):
            assert earlier["__closed_position__"] is not None
            assert earlier["__closed_position__"] <= later["__opened_position__"]
            assert not earlier["__current__"]
        assert sum(v["__current__"] for v in versions) <= 1


def _assert_history_is_current(config: PipelineConfig, database: str, table: str = "orders") -> None:
    """The history's current versions are the upsert table's rows; versions follow each other."""
    history = _history(config, database, table)
    _assert_versions_follow_each_other(history)
    upsert = open_catalog(config).load_table(sink_name(config, TableId(database, table)))
    current = history.scan(row_filter="__current__ == True").to_arrow()
    names = upsert.schema().column_names
    assert bag(current.select(names).to_pylist()) == bag(upsert.scan().to_arrow().to_pylist())


def test_changelog_replays_to_the_source_through_kills_and_a_schema_change(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(*SET_UP, database=database)
    config = _config(mariadb, database, tmp_path)
    plan(config)
    assert run_snapshot(config, spark).complete
    orders = _changelog(config, database, "orders")
    reads = orders.scan().to_arrow()
    assert reads.num_rows == 300
    assert set(reads.column("__op__").to_pylist()) == {"+I"}
    assert set(reads.column("__origin__").to_pylist()) == {"snapshot"}
    assert [f.name for f in orders.schema().fields[-len(METADATA) :]] == METADATA.names
    assert [str(f.transform) for f in orders.spec().fields] == ["day"]

    stop, pause = threading.Event(), Pause()
    done: list[int] = []
    states = []
    writer = threading.Thread(target=_workload, args=(mariadb, database, stop, done, pause))
    writer.start()
    try:
        path = write_config_file(tmp_path, config, mariadb)
        kill_9_at(path, "before-commit")
        states.append(pause.state(mariadb, config, ("orders",)))
        kill_9_at(path, "between-commits")
        states.append(pause.state(mariadb, config, ("orders",)))
        kill_9_at(path, "after-commit")
        written = len(done)
    finally:
        stop.set()
        writer.join()
    assert written > 30  # the column was added mid-stream
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)

    ops = _assert_replays_to_the_upsert_table(config, database, "orders")
    assert set(ops) == {"+I", "-U", "+U", "-D"}
    assert set(_assert_replays_to_the_upsert_table(config, database, "visits")) == {"+I", "-U", "+U", "-D"}
    _assert_gtids_are_the_servers(
        mariadb, _changelog(config, database, "orders").scan().to_arrow().to_pylist()
    )
    assert "seen" in _changelog(config, database, "orders").schema().column_names
    # The table as of positions the source was seen at, by the docs' query (the columns then).
    history = _history(config, database)
    assert history.properties["write.merge.mode"] == "merge-on-read"  # position deletes, a key index
    for position, found in states:
        rows = found["orders"]
        columns = [name for name, _ in next(iter(rows))]
        assert as_of(_changelog(config, database, "orders"), position, columns) == rows
        assert as_of(history, position, columns, "history") == rows
    _assert_history_is_current(config, database)

    # verify checks the history's current versions and the changelogs' replayed state too.
    report = verify(config, "v1")
    checked = {t.sink: {v.status for v in t.verdicts} for t in report.tables}
    for suffix in ("_history", "_changelog"):
        assert checked[sink_name(config, TableId(database, "orders")) + suffix] == {"equal"}
    assert checked[sink_name(config, TableId(database, "visits")) + "_changelog"] == {"equal"}
    assert set().union(*checked.values()) == {"equal"}

    # A run with nothing new appends nothing (a replayed batch is skipped).
    before = _changelog(config, database, "orders").scan().to_arrow().num_rows
    run_stream(config, spark, until_caught_up=True)
    assert _changelog(config, database, "orders").scan().to_arrow().num_rows == before


def test_a_changelog_added_later_minimal_images_and_a_healed_gap(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(*SET_UP[:2], database=database)
    config = stream_config(mariadb, database, tmp_path, chunk_size=100)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute("UPDATE orders SET total = 0 WHERE id <= 10", "DELETE FROM orders WHERE id > 290",
                    database=database)  # fmt: skip
    run_stream(config, spark, until_caught_up=True)

    # The rule comes later: the changelog starts from the upsert table's rows, at its offset.
    config = _config(mariadb, database, tmp_path, "evolve")
    mariadb.execute("UPDATE orders SET note = 'after the rule' WHERE id = 20", database=database)
    run_stream(config, spark, until_caught_up=True)
    rows = _changelog(config, database, "orders").scan().to_arrow().to_pylist()
    assert Counter((r["__origin__"], r["__op__"]) for r in rows) == {
        ("snapshot", "+I"): 290,
        ("binlog", "-U"): 1,
        ("binlog", "+U"): 1,
    }
    _assert_replays_to_the_upsert_table(config, database, "orders")
    _assert_history_is_current(config, database)

    # MINIMAL images: the changelog's before images and deleted rows come whole all the same.
    minimal = ["UPDATE orders SET total = total + 1 WHERE id = 30", "DELETE FROM orders WHERE id = 31"]
    in_session(mariadb, database, "SET SESSION binlog_row_image = 'MINIMAL'", *minimal)
    # A statement-logged update no row event carries: healed by a backfill of its table.
    in_session(mariadb, database, "SET SESSION binlog_format = 'STATEMENT'",
             "UPDATE orders SET tenant_id = tenant_id + 100 WHERE id % 9 = 0")  # fmt: skip
    mariadb.execute("DELETE FROM orders WHERE id = 45", "UPDATE orders SET note = 'x' WHERE id = 46",
                    database=database)  # fmt: skip
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    rows = _changelog(config, database, "orders").scan().to_arrow().to_pylist()
    minimal = [r for r in rows if r["id"] in (30, 31) and r["__origin__"] == "binlog"]
    assert {(r["__op__"], r["note"]) for r in minimal} >= {("-U", "note 30"), ("-D", "note 31")}
    assert {r["__op__"] for r in rows if r["__origin__"] == "backfill"} == {"-D", "+I"}
    _assert_replays_to_the_upsert_table(config, database, "orders")
    _assert_history_is_current(config, database)

    # A TRUNCATE removes every row: each a -D in the changelog, each current version closed — at
    # the statement's time (the session's clock set, so its binlog event carries a known time).
    before = Counter(r["__op__"] for r in rows)
    in_session(mariadb, database, "SET TIMESTAMP = 1700000000", "TRUNCATE TABLE orders")
    mariadb.execute("INSERT INTO orders VALUES (7, 1, 'new', 2)", database=database)
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    rows = _changelog(config, database, "orders").scan().to_arrow().to_pylist()
    assert Counter(r["__op__"] for r in rows) - before == {"-D": 288, "+I": 1}
    then = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)
    assert Counter(r["__op__"] for r in rows if r["__event_time__"] == then) == {"-D": 288}
    closed = _history(config, database).scan(row_filter="__current__ == False").to_arrow().to_pylist()
    assert sum(v["__valid_to__"] == then for v in closed) == 288
    _assert_replays_to_the_upsert_table(config, database, "orders")
    _assert_history_is_current(config, database)


def test_shards_routed_into_one_table_share_its_changelog_and_history(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Routed sources: one changelog and one history for the merged table, each row naming its
    shard (``_source_table``), a shard created mid-stream and a backfill of one shard's keys."""
    mariadb.execute(
        "CREATE TABLE orders_1 (id INT PRIMARY KEY, amount INT)",
        "CREATE TABLE orders_2 (id INT PRIMARY KEY, amount INT)",
        "INSERT INTO orders_1 SELECT seq, seq FROM seq_1_to_200",
        "INSERT INTO orders_2 SELECT seq, seq * 10 FROM seq_1_to_100",  # the same ids: keys collide
        database=database,
    )
    config = routed_config(mariadb, database, tmp_path, ("changelog", "history"))
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "UPDATE orders_1 SET amount = -1 WHERE id <= 10",
        "UPDATE orders_2 SET id = 500 WHERE id = 5",
        "DELETE FROM orders_2 WHERE id = 6",
        "CREATE TABLE orders_3 (id INT PRIMARY KEY, amount INT)",  # a new shard
        "INSERT INTO orders_3 VALUES (1, 1)",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    # A backfill of one shard's key range (its rows removed behind the stream's back first).
    catalog = open_catalog(config)
    catalog.load_table("ods.orders").delete(f"_source_table == '{database}.orders_2' and id < 30")
    run_backfill(config, spark, "shard", tables=[f"{database}.orders_2"], key_range=KeyRange(1, 50))
    mariadb.execute("UPDATE orders_2 SET amount = 0 WHERE id = 40", database=database)
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    upsert, changelog, history = (
        catalog.load_table(f"ods.orders{s}") for s in ("", "_changelog", "_history")
    )
    expected = bag(upsert.scan().to_arrow().to_pylist())
    columns = upsert.schema().column_names
    assert replay_changelog(changelog.scan().to_arrow().to_pylist(), columns) == expected
    current = history.scan(row_filter="__current__ == True").to_arrow()
    assert bag(current.select(columns).to_pylist()) == expected
    shards = {r["_source_table"] for r in changelog.scan().to_arrow().to_pylist()}
    assert shards == {f"{database}.orders_{n}" for n in (1, 2, 3)}


def test_a_column_added_with_a_default_changes_every_row_in_the_changelog_and_history(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """``ADD COLUMN … DEFAULT`` gives the rows the source holds a value without a row event: each is
    a ``-U``/``+U`` in the changelog (origin ``schema``) and a new version in the history, at the
    statement, exactly once through a kill between those commits and the upsert table's fill; two
    columns one statement adds are two changes. Without them the changelog and the history's
    current versions held NULL where the source holds the value (verify found them drifted)."""
    mariadb.execute(*SET_UP, database=database)
    config = _config(mariadb, database, tmp_path)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute("UPDATE orders SET total = 0 WHERE id <= 10", database=database)
    run_stream(config, spark, until_caught_up=True)
    mariadb.execute(
        "ALTER TABLE orders ADD COLUMN c INT NOT NULL DEFAULT 7, ADD COLUMN d VARCHAR(5) DEFAULT 'x'",
        "ALTER TABLE visits ADD COLUMN c INT NOT NULL DEFAULT 7",
        "UPDATE orders SET c = 8 WHERE id = 5",
        "DELETE FROM visits WHERE n = 3 LIMIT 1",
        database=database,
    )
    kill_9_at(write_config_file(tmp_path, config, mariadb), "schema-after-companion-fill")
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)

    rows = _changelog(config, database, "orders").scan().to_arrow().to_pylist()
    fills = Counter((r["__op__"], r["__order__"]) for r in rows if r["__origin__"] == "schema")
    assert fills == {("-U", 0): 300, ("+U", 1): 300, ("-U", 2): 300, ("+U", 3): 300}
    assert {(r["c"], r["d"]) for r in rows if r["__origin__"] == "schema" and r["__op__"] == "+U"} == {
        (7, None),
        (7, "x"),
    }
    _assert_replays_to_the_upsert_table(config, database, "orders")
    _assert_replays_to_the_upsert_table(config, database, "visits")  # no key: signed replay
    _assert_history_is_current(config, database)
    history = _history(config, database).scan().to_arrow().to_pylist()
    assert sum(v["__current__"] and v["c"] == 7 and v["d"] == "x" for v in history) == 299
    report = verify(config, "v1")
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}


def test_a_renamed_column_and_a_widened_type_follow_into_the_changelog_and_history(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Under ``evolve`` a renamed column keeps its values under the new name in the changelog and
    the history, as in the upsert table (they gained a new, empty column and verify found both
    drifted), and an ``INT`` made ``BIGINT`` is promoted there too (a value past 2^31 stopped the
    stream at every run: "Integer value … not in range")."""
    mariadb.execute(*SET_UP[:2], database=database)
    config = _config(mariadb, database, tmp_path, "evolve")
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "UPDATE orders SET note = 'before' WHERE id = 1",
        "ALTER TABLE orders RENAME COLUMN note TO memo",
        "UPDATE orders SET memo = 'after' WHERE id = 2",
        "ALTER TABLE orders MODIFY tenant_id BIGINT NOT NULL",
        "UPDATE orders SET tenant_id = 3000000000 WHERE id = 3",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    columns = _changelog(config, database, "orders").schema().column_names
    assert "memo" in columns
    assert "note" not in columns
    _assert_replays_to_the_upsert_table(config, database, "orders")
    _assert_history_is_current(config, database)
    report = verify(config, "v1")
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}


def test_a_renamed_table_takes_its_changelog_and_history_along(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """A table's changelog and history are renamed with its sink table, through a swap and a kill
    between the two renames: the new name's replay is its whole past (they stayed under the old
    name and the new name's began empty: verify found them drifted). A table the stream created
    or renamed after the snapshot is verified as well (verify left it out, unplanned)."""
    mariadb.execute(*SET_UP[:2], database=database)
    raw = config_dict(_config(mariadb, database, tmp_path, "evolve"))
    raw["sink"]["modes"] = [
        {"source_table": rf"{database}\.orders.*", "mode": ["upsert", "changelog", "history"]}
    ]
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "UPDATE orders SET note = 'before' WHERE id = 1",
        "CREATE TABLE orders_new LIKE orders",
        "INSERT INTO orders_new SELECT * FROM orders WHERE id <= 200",
        "UPDATE orders_new SET note = 'new' WHERE id <= 50",
        "RENAME TABLE orders TO orders_old, orders_new TO orders",
        "UPDATE orders SET total = 9 WHERE id = 7",
        "DELETE FROM orders_old WHERE id = 8",
        "RENAME TABLE orders_old TO orders_2023",
        "UPDATE orders_2023 SET total = 1 WHERE id = 9",
        database=database,
    )
    kill_9_at(write_config_file(tmp_path, config, mariadb), "schema-before-companion-rename")
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    catalog = open_catalog(config)
    names = {".".join(i) for ns in catalog.list_namespaces() for i in catalog.list_tables(ns)}
    sinks = [sink_name(config, TableId(database, t)) for t in ("orders", "orders_2023")]
    assert names == {f"{s}{kind}" for s in sinks for kind in ("", "_changelog", "_history")}
    for table in ("orders", "orders_2023"):
        _assert_replays_to_the_upsert_table(config, database, table)
        _assert_history_is_current(config, database, table)
    report = verify(config, "v1")
    assert {t.table for t in report.tables} == {f"{database}.orders", f"{database}.orders_2023"}
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}


def test_a_table_replaced_under_lenient_replaces_its_changelog_and_history(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """``lenient`` keeps a dropped table's sink table. A table renamed onto its name then failed the
    stream at every run (pyiceberg: "Table … already exists"); one created there again left the
    changelog and history holding the old rows besides the new (verify: drifted). Now the kept
    table (and its companions) goes aside under ``<name>__before_<file>_<pos>`` for a rename, and
    the old rows leave the companions (``-D``, versions closed) for a creation."""
    mariadb.execute(*SET_UP[:2], database=database)
    config = _config(mariadb, database, tmp_path, "lenient")
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "CREATE TABLE orders_new LIKE orders",
        "INSERT INTO orders_new SELECT * FROM orders WHERE id <= 100",
        "UPDATE orders_new SET note = 'new'",
        "DROP TABLE orders",
        "RENAME TABLE orders_new TO orders",
        "UPDATE orders SET total = 1 WHERE id = 5",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    _assert_replays_to_the_upsert_table(config, database, "orders")
    _assert_history_is_current(config, database)
    catalog = open_catalog(config)
    namespace = sink_name(config, TableId(database, "orders")).rsplit(".", 1)[0]
    aside = [".".join(i) for i in catalog.list_tables(namespace) if "__before_" in i[-1]]
    assert len(aside) == 3  # the kept table and its changelog and history: nothing lost
    kept = next(a for a in aside if a.endswith(tuple("0123456789")))
    assert catalog.load_table(kept).scan().to_arrow().num_rows == 300
    mariadb.execute(
        "DROP TABLE orders",
        SET_UP[0],
        "INSERT INTO orders VALUES (1, 1, 'again', 1), (999, 2, NULL, 2)",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    _assert_replays_to_the_upsert_table(config, database, "orders")
    _assert_history_is_current(config, database)
    report = verify(config, "v1")
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}


def test_a_history_beside_an_after_images_changelog_closes_versions_without_reading_them(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``changelog_updates: after`` keeps no before image in the changelog, but the history still
    gets both: each version a batch closes is made of its key's before image and the current
    versions' index, and no stored version is read (``HistoryWriter.current`` would fail)."""
    from binlake.sink.history.scd2_writer import HistoryWriter

    mariadb.execute(*SET_UP[:2], database=database)
    raw = config_dict(_config(mariadb, database, tmp_path))
    mode = {"mode": ["upsert", "changelog", "history"], "changelog_updates": "after"}
    raw["sink"]["modes"] = [{"source_table": rf"{database}\.orders", **mode}]
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete

    def read(self: HistoryWriter, keys: Any) -> Any:
        raise AssertionError(f"{self.identifier}: read the stored versions of {keys.num_rows} keys")

    monkeypatch.setattr(HistoryWriter, "current", read)
    mariadb.execute(
        "UPDATE orders SET note = 'changed' WHERE id <= 20",
        "UPDATE orders SET note = 'twice', total = total + 1 WHERE id <= 5",
        "DELETE FROM orders WHERE id BETWEEN 21 AND 25",
        "UPDATE orders SET id = id + 1000 WHERE id BETWEEN 26 AND 28",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    _assert_history_is_current(config, database)
    ops = _changelog(config, database, "orders").scan().to_arrow().column("__op__").to_pylist()
    assert "-U" not in set(ops)
    history = _history(config, database, "orders")
    closed = history.scan(row_filter="__current__ == False").to_arrow().to_pylist()
    notes = Counter((r["id"], r["note"]) for r in closed)
    assert notes[(1, "note 1")] == 1  # each version closed once, with the values it held
    assert notes[(1, "changed")] == 1
    assert {r["id"] for r in closed} == set(range(1, 29))


def test_a_history_beside_the_upsert_table_alone_takes_deletes(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """``mode: [upsert, history]`` (no changelog): the stream read a delete's before image as its
    key alone, and a NOT NULL column of it stopped the stream at every run ("Casting field
    'tenant_id' with null values to non-nullable"); its images are read whole now."""
    mariadb.execute(*SET_UP[:2], database=database)
    raw = config_dict(_config(mariadb, database, tmp_path))
    raw["sink"]["modes"] = [{"source_table": rf"{database}\.orders", "mode": ["upsert", "history"]}]
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "DELETE FROM orders WHERE id = 5", "UPDATE orders SET id = 900 WHERE id = 6", database=database
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    _assert_history_is_current(config, database)
