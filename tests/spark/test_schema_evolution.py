"""Schema changes in the binlog, end to end: DML before and after each DDL in one catch-up.

Each test starts a stream (which records the schemas it begins with), then writes DML and DDL
while no stream runs, and catches up once: the stream meets every DDL in the middle of its range.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig
from binlake.events import AddColumn, TableId
from binlake.planner import discover_tables, plan
from binlake.sink.catalog import open_catalog, sink_identifier, sink_name
from binlake.spark.backfill_job import run_backfill
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import StreamError, run_stream
from binlake.state.store import StateStore
from binlake.stream.schema_changes import apply_request
from binlake.testing.compare import bag, sink_rows, source_rows
from binlake.testing.private_server import PrivateMariaDB
from binlake.verify.verification import verify
from tests.helpers import (
    assert_sink_equals_source,
    concurrent_writes,
    config_dict,
    in_session,
    kill_9_at,
    run_binlake,
    start_stream_process,
    stream_config,
    write_config_file,
)

pytestmark = pytest.mark.slow

TABLE = "CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10), c INT)"
#: DML around every column change, in one catch-up.
COLUMN_CHANGES = [
    "INSERT INTO t VALUES (1, 1, 'one', 10), (2, 2, 'two', 20), (3, 3, 'three', 30)",
    "ALTER TABLE t ADD COLUMN d DECIMAL(6,2) AFTER a",
    "INSERT INTO t VALUES (4, 4, 4.5, 'four', 40)",
    "UPDATE t SET d = 1.25, c = c + 1 WHERE id = 1",
    "ALTER TABLE t DROP COLUMN c",
    "INSERT INTO t VALUES (5, 5, 5.5, 'five')",
    "UPDATE t SET b = 'TWO' WHERE id = 2",
    "ALTER TABLE t RENAME COLUMN b TO bb",
    "INSERT INTO t VALUES (6, 6, 6.5, 'six')",
    "DELETE FROM t WHERE id = 3",
    "ALTER TABLE t MODIFY a BIGINT",
    "INSERT INTO t VALUES (7, 9000000000, 7.5, 'seven')",
    "ALTER TABLE t CHANGE bb b2 VARCHAR(40)",
    "INSERT INTO t VALUES (8, 8, 8.5, 'eight, a longer text')",
    "UPDATE t SET b2 = 'uno' WHERE id = 1",
]


def _config(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, behavior: str, **stream: Any
) -> PipelineConfig:
    config = stream_config(mariadb, database, tmp_path, stream or None, startup_mode="latest-offset")
    raw = config_dict(config)
    raw["pipeline"]["schema_change_behavior"] = behavior
    return PipelineConfig.model_validate(raw)


def _start(mariadb: PrivateMariaDB, database: str, config: PipelineConfig, spark: Any, ddl: str) -> None:
    mariadb.execute(ddl, database=database)
    run_stream(config, spark, until_caught_up=True)  # records the schemas it starts with


def _column_changes(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, behavior: str
) -> PipelineConfig:
    """A stream under ``behavior`` that begins on TABLE; then COLUMN_CHANGES written, not yet read."""
    config = _config(mariadb, database, tmp_path, behavior)
    _start(mariadb, database, config, spark, TABLE)
    mariadb.execute(*COLUMN_CHANGES, database=database)
    return config


def _sink_columns(config: PipelineConfig, table: TableId) -> list[str]:
    catalog = open_catalog(config)
    return [f.name for f in catalog.load_table(sink_name(config, table)).schema().fields]


def _projected_equal(config: PipelineConfig, table: TableId, renamed: dict[str, list[str]]) -> None:
    """The sink, read through the source's columns, equals the source; a renamed column's value is
    under its newest name that holds one (lenient adds the new name, rows before keep the old)."""
    (schema,) = [s for s in discover_tables(config) if s.table == table]
    source = bag(source_rows(config, schema))

    def value(row: dict[str, Any], name: str) -> Any:
        return next((row[n] for n in renamed.get(name, [name]) if row[n] is not None), None)

    sink = bag([{k: value(r, k) for k in schema.column_names} for r in sink_rows(config, table)])
    assert sink == source


@pytest.mark.parametrize("behavior", ["evolve", "try_evolve"])  # every change here is one Iceberg can make
def test_evolve_follows_every_column_change(
    behavior: str, mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _column_changes(mariadb, database, tmp_path, spark, behavior)
    report = run_stream(config, spark, until_caught_up=True)
    assert report.batches >= 5  # flushed before each change
    assert_sink_equals_source(config)
    t = TableId(database, "t")
    assert _sink_columns(config, t) == ["id", "a", "d", "b2"]
    store = StateStore(config.pipeline.resolved_state_uri)
    requests = store.schema_requests(config.pipeline.name).all()
    assert [r.status for r in requests] == ["applied"] * len(requests)
    assert len(requests) == 6  # add, drop, rename, type, and CHANGE: rename + type
    # the history holds every version by position: the first, then one per statement
    assert len(store.schema_history(config.pipeline.name).versions(t)) == 1 + 5


def test_lenient_keeps_dropped_and_renamed_columns(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _column_changes(mariadb, database, tmp_path, spark, "lenient")
    run_stream(config, spark, until_caught_up=True)
    t = TableId(database, "t")
    _projected_equal(config, t, {"b2": ["b2", "bb", "b"]})
    # c was dropped: kept; b renamed to bb, then bb to b2: both kept, b2 added.
    assert _sink_columns(config, t) == ["id", "a", "d", "b", "c", "bb", "b2"]
    rows = {r["id"]: r for r in sink_rows(config, t)}
    assert rows[4]["c"] == 40  # written before the drop, never touched again: kept
    assert rows[5]["c"] is None  # written after it
    assert rows[4]["b"] == "four"  # before the rename …
    assert rows[6]["b"] is None  # … and after it
    assert rows[6]["bb"] == "six"


def test_tables_created_truncated_dropped_and_renamed(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _config(mariadb, database, tmp_path, "evolve")
    mariadb.execute("CREATE TABLE gone (id INT PRIMARY KEY)", "CREATE TABLE r (id INT PRIMARY KEY, v INT)",
                    database=database)  # fmt: skip
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    mariadb.execute(
        "INSERT INTO t VALUES (1, 1), (2, 2)",
        "INSERT INTO gone VALUES (1)",
        "INSERT INTO r VALUES (1, 1)",
        "TRUNCATE TABLE t",
        "INSERT INTO t VALUES (3, 3)",
        "CREATE TABLE n (id INT PRIMARY KEY, s VARCHAR(5))",
        "INSERT INTO n VALUES (1, 'x'), (2, 'y')",
        "UPDATE n SET s = 'z' WHERE id = 2",
        "DROP TABLE gone",
        "RENAME TABLE r TO r2",
        "INSERT INTO r2 VALUES (2, 2)",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)  # t (truncated), n (created), r2 (renamed)
    catalog = open_catalog(config)
    assert not catalog.table_exists(sink_name(config, TableId(database, "gone")))
    assert not catalog.table_exists(sink_name(config, TableId(database, "r")))
    assert sorted(r["id"] for r in sink_rows(config, TableId(database, "r2"))) == [1, 2]


def test_exception_stops_at_the_change_after_committing_what_came_before(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _config(mariadb, database, tmp_path, "exception")
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    mariadb.execute(
        "INSERT INTO t VALUES (1, 1)",
        "ALTER TABLE t ADD COLUMN w INT",
        "INSERT INTO t VALUES (2, 2, 2)",
        database=database,
    )
    with pytest.raises(StreamError, match=r"add column `w` int\(11\) to .*\.t.*`exception`"):
        run_stream(config, spark, until_caught_up=True)
    t = TableId(database, "t")
    assert [r["id"] for r in sink_rows(config, t)] == [1]  # flushed before the change, nothing after
    assert _sink_columns(config, t) == ["id", "v"]


def test_external_applier_waits_then_a_restart_applies_it_once(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _config(mariadb, database, tmp_path, "evolve",
                     schema_change_applier="external", schema_change_timeout_s=2)  # fmt: skip
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    mariadb.execute(
        "INSERT INTO t VALUES (1, 1)",
        "ALTER TABLE t ADD COLUMN w INT",
        "INSERT INTO t VALUES (2, 2, 2)",
        database=database,
    )
    # Nothing applies it: the stream waits, then fails naming the pending change.
    with pytest.raises(StreamError, match=r"add column `w`.* still pending after 2 s"):
        run_stream(config, spark, until_caught_up=True)
    store = StateStore(config.pipeline.resolved_state_uri)
    (pending,) = store.schema_requests(config.pipeline.name).all("pending")
    assert isinstance(pending.change, AddColumn)
    status = run_binlake("--config", str(write_config_file(tmp_path, config, mariadb)), "status")
    assert re.search(
        r"schema change at binlog\.\d+:\d+: add column `w` int\(11\) to .*: pending", status.stdout
    )
    t = TableId(database, "t")
    assert [r["id"] for r in sink_rows(config, t)] == [1]
    # The DDL-apply step (Airflow's task) applies it; the restarted stream goes on, once.
    assert apply_request(config, store, pending) == "applied"
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    assert [r.status for r in store.schema_requests(config.pipeline.name).all()] == ["applied"]


def test_ignore_keeps_the_sink_schema(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _column_changes(mariadb, database, tmp_path, spark, "ignore")
    run_stream(config, spark, until_caught_up=True)
    t = TableId(database, "t")
    assert _sink_columns(config, t) == ["id", "a", "b", "c"]
    rows = {r["id"]: r for r in sink_rows(config, t)}
    assert sorted(rows) == [1, 2, 4, 5, 6, 7, 8]
    assert rows[7]["a"] is None  # a became BIGINT: 9000000000 does not fit the sink's int
    assert rows[6]["b"] is None  # renamed away from the sink's b


def test_try_evolve_goes_on_when_the_sink_refuses(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _config(mariadb, database, tmp_path, "try_evolve")
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, a INT)")
    mariadb.execute(
        "INSERT INTO t VALUES (1, 1)",
        "ALTER TABLE t MODIFY a VARCHAR(10)",  # int → string: Iceberg cannot
        "INSERT INTO t VALUES (2, 'two')",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    store = StateStore(config.pipeline.resolved_state_uri)
    (request,) = store.schema_requests(config.pipeline.name).all()
    assert request.status == "ignored"
    assert "not a safe type promotion" in (request.message or "")
    rows = {r["id"]: r for r in sink_rows(config, TableId(database, "t"))}
    assert rows == {1: {"id": 1, "a": 1}, 2: {"id": 2, "a": None}}


def test_lenient_puts_an_incompatible_type_change_in_a_new_column(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _config(mariadb, database, tmp_path, "lenient")
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, a INT)")
    mariadb.execute(
        "INSERT INTO t VALUES (1, 1)",
        "ALTER TABLE t MODIFY a VARCHAR(10)",
        "INSERT INTO t VALUES (2, 'two')",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    rows = {r["id"]: r for r in sink_rows(config, TableId(database, "t"))}
    assert rows == {1: {"id": 1, "a": 1, "a__varchar": None}, 2: {"id": 2, "a": None, "a__varchar": "two"}}


def test_renamed_out_of_and_into_the_captured_tables(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _config(mariadb, database, tmp_path, "evolve")
    raw = config_dict(config)
    raw["source"]["tables_exclude"] = [rf"{database}\.tmp_.*"]
    config = PipelineConfig.model_validate(raw)
    mariadb.execute("CREATE TABLE tmp_src (id INT PRIMARY KEY, v INT)", "INSERT INTO tmp_src VALUES (1, 1)",
                    database=database)  # fmt: skip
    _start(mariadb, database, config, spark, "CREATE TABLE keep (id INT PRIMARY KEY)")
    mariadb.execute(
        "INSERT INTO keep VALUES (1)",
        "RENAME TABLE keep TO tmp_keep",  # out: no longer captured, its sink table stays
        "INSERT INTO tmp_keep VALUES (2)",
        "RENAME TABLE tmp_src TO incoming",  # in: streamed from here on
        "INSERT INTO incoming VALUES (2, 2)",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert [r["id"] for r in sink_rows(config, TableId(database, "keep"))] == [1]
    # the row it held when it was renamed in is in no row event: the stream's backfill read it
    assert sorted(sink_rows(config, TableId(database, "incoming")), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1},
        {"id": 2, "v": 2},
    ]
    store = StateStore(config.pipeline.resolved_state_uri)
    statuses = [
        (type(r.change).__name__, r.status) for r in store.schema_requests(config.pipeline.name).all()
    ]
    assert statuses == [("RenameTable", "ignored"), ("CreateTable", "applied")]


def test_kill_9_before_then_after_applying_a_change_then_restart_applies_it_once(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    # One set-up, three runs: killed before the first change is applied, killed on the restart
    # right after it is applied (before the second), then a clean restart applies the rest once.
    config = _config(mariadb, database, tmp_path, "evolve")
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    mariadb.execute(
        "INSERT INTO t VALUES (1, 1), (2, 2)",
        "ALTER TABLE t ADD COLUMN w VARCHAR(5) AFTER id, DROP COLUMN v",
        "INSERT INTO t VALUES (3, 'three')",
        "UPDATE t SET w = 'one' WHERE id = 1",
        database=database,
    )
    path = write_config_file(tmp_path, config, mariadb)
    store = StateStore(config.pipeline.resolved_state_uri)
    t = TableId(database, "t")

    def statuses() -> list[str]:
        return [r.status for r in store.schema_requests(config.pipeline.name).all()]

    kill_9_at(path, "schema-before-apply")
    assert statuses() == ["pending", "pending"]
    assert _sink_columns(config, t) == ["id", "v"]
    assert sorted(r["id"] for r in sink_rows(config, t)) == [1, 2]  # flushed; nothing after the DDL

    kill_9_at(path, "schema-after-apply")
    assert statuses() == ["applied", "pending"]  # killed right after the first of the two
    assert sorted(r["id"] for r in sink_rows(config, t)) == [1, 2]

    rerun = start_stream_process(path, None)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()
    assert statuses() == ["applied", "applied"]
    assert _sink_columns(config, t) == ["id", "w"]
    assert_sink_equals_source(config)


TABLE_CHANGES = [
    "INSERT INTO t VALUES (1, 1), (2, 2)",
    "INSERT INTO gone VALUES (1)",
    "INSERT INTO r VALUES (1, 1)",
    "TRUNCATE TABLE t",
    "INSERT INTO t VALUES (3, 3)",
    "CREATE TABLE n (id INT PRIMARY KEY, s VARCHAR(5))",
    "INSERT INTO n VALUES (1, 'x')",
    "DROP TABLE gone",
    "RENAME TABLE r TO r2",
    "INSERT INTO r2 VALUES (2, 2)",
    "ALTER TABLE t CONVERT TO CHARACTER SET latin1",  # a table statement the parser cannot read
    "INSERT INTO t VALUES (4, 4)",
]


@pytest.mark.parametrize(
    ("behavior", "t_ids", "gone_kept", "n_ids", "r2_ids"),
    [
        ("lenient", [1, 2, 3, 4], True, [1], [1, 2]),  # truncate and drop are logged, not applied
        ("try_evolve", [3, 4], False, [1], [1, 2]),
        ("ignore", [1, 2, 3, 4], True, None, None),  # no new sink tables, none renamed
    ],
)
def test_table_changes_under_each_behaviour(
    behavior: str,
    t_ids: list[int],
    gone_kept: bool,
    n_ids: list[int] | None,
    r2_ids: list[int] | None,
    mariadb: PrivateMariaDB,
    database: str,
    tmp_path: Path,
    spark: Any,
) -> None:
    config = _config(mariadb, database, tmp_path, behavior)
    mariadb.execute("CREATE TABLE gone (id INT PRIMARY KEY)", "CREATE TABLE r (id INT PRIMARY KEY, v INT)",
                    database=database)  # fmt: skip
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    mariadb.execute(*TABLE_CHANGES, database=database)
    run_stream(config, spark, until_caught_up=True)
    catalog = open_catalog(config)

    def ids(table: str) -> list[int] | None:
        identifier = sink_name(config, TableId(database, table))
        if not catalog.table_exists(identifier):
            return None
        return sorted(r["id"] for r in catalog.load_table(identifier).scan().to_arrow().to_pylist())

    assert ids("t") == t_ids
    assert (ids("gone") is not None) == gone_kept
    assert ids("n") == n_ids
    assert ids("r2") == r2_ids


def test_a_table_statement_it_cannot_read_stops_evolve_naming_where(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _config(mariadb, database, tmp_path, "evolve")
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    mariadb.execute(
        "INSERT INTO t VALUES (1, 1)",
        "CREATE TABLE base (id INT) ENGINE=MyISAM",
        "CREATE TABLE m (id INT) ENGINE=MERGE UNION=(base)",  # holds no rows of its own
        "INSERT INTO t VALUES (2, 2)",
        database=database,
    )
    with pytest.raises(StreamError, match=r"table statement at binlog\.\d+:\d+ could not be read.*MERGE"):
        run_stream(config, spark, until_caught_up=True)
    assert [r["id"] for r in sink_rows(config, TableId(database, "t"))] == [1]


# -- schema changes as production runs them (issue 20) ---------------------------------------------


def _only(mariadb: PrivateMariaDB, config: PipelineConfig, pattern: str) -> PipelineConfig:
    raw = config_dict(config)
    raw["source"]["tables"] = [pattern]
    return PipelineConfig.model_validate(raw)


def _sink_tables(config: PipelineConfig, database: str) -> list[str]:
    catalog = open_catalog(config)
    namespace = sink_identifier(config, TableId(database, "t"))[0]
    return sorted(name for _, name in catalog.list_tables(namespace))


GH_OST = [
    "CREATE /* gh-ost */ TABLE `{db}`.`_t_gho` LIKE `{db}`.`t`",
    "ALTER /* gh-ost */ TABLE `{db}`.`_t_gho` MODIFY v INT UNSIGNED, "
    "ADD COLUMN tag VARCHAR(8) NOT NULL DEFAULT 'std'",
    "CREATE /* gh-ost */ TABLE `{db}`.`_t_ghc` (id bigint auto_increment, last_update timestamp not null "
    "DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, hint varchar(64) charset ascii not null, "
    "value varchar(4096) charset ascii not null, primary key(id), unique key hint_uidx(hint)) "
    "auto_increment=256",
    "INSERT /* gh-ost */ IGNORE INTO `{db}`.`_t_gho` (`id`, `v`) (SELECT `id`, `v` FROM `{db}`.`t` "
    "FORCE INDEX (`PRIMARY`) WHERE ((`id` > 0)) AND ((`id` <= 60)) LOCK IN SHARE MODE)",
    # the application writes on; gh-ost applies each change from the binlog to the shadow
    "UPDATE t SET v = v + 7 WHERE id IN (5, 70)",
    "REPLACE /* gh-ost */ INTO `{db}`.`_t_gho` (`id`, `v`) SELECT id, v FROM t WHERE id = 5",
    "INSERT INTO t VALUES (200, 200)",
    "INSERT /* gh-ost */ IGNORE INTO `{db}`.`_t_gho` (`id`, `v`) (SELECT `id`, `v` FROM `{db}`.`t` "
    "FORCE INDEX (`PRIMARY`) WHERE ((`id` > 60)) AND ((`id` <= 200)) LOCK IN SHARE MODE)",
    "DELETE FROM t WHERE id = 3",
    "DELETE /* gh-ost */ FROM `{db}`.`_t_gho` WHERE id = 3",
    "RENAME /* gh-ost */ TABLE `{db}`.`t` TO `{db}`.`_t_del`, `{db}`.`_t_gho` TO `{db}`.`t`",
    "DROP /* gh-ost */ TABLE IF EXISTS `{db}`.`_t_del`",
    "DROP /* gh-ost */ TABLE IF EXISTS `{db}`.`_t_ghc`",
    "INSERT INTO t VALUES (300, 3000000000, 'big')",  # above 2^31: only right if v is unsigned
    "UPDATE t SET tag = 'x' WHERE id = 1",
]
PT_OSC = [
    "CREATE TABLE `{db}`.`_t_new` LIKE `{db}`.`t`",
    "ALTER TABLE `{db}`.`_t_new` ADD COLUMN w DECIMAL(12,2) DEFAULT 1.50, MODIFY v BIGINT",
    "CREATE TRIGGER `pt_osc_{db}_t_del` AFTER DELETE ON `{db}`.`t` FOR EACH ROW "
    "DELETE IGNORE FROM `{db}`.`_t_new` WHERE `{db}`.`_t_new`.`id` <=> OLD.`id`",
    "CREATE TRIGGER `pt_osc_{db}_t_upd` AFTER UPDATE ON `{db}`.`t` FOR EACH ROW "
    "REPLACE INTO `{db}`.`_t_new` (`id`, `v`) VALUES (NEW.`id`, NEW.`v`)",
    "CREATE TRIGGER `pt_osc_{db}_t_ins` AFTER INSERT ON `{db}`.`t` FOR EACH ROW "
    "REPLACE INTO `{db}`.`_t_new` (`id`, `v`) VALUES (NEW.`id`, NEW.`v`)",
    "INSERT LOW_PRIORITY IGNORE INTO `{db}`.`_t_new` (`id`, `v`) SELECT `id`, `v` FROM `{db}`.`t` "
    "FORCE INDEX(`PRIMARY`) WHERE ((`id` >= '1')) AND ((`id` <= '60')) LOCK IN SHARE MODE",
    "UPDATE t SET v = v + 7 WHERE id IN (5, 70)",  # the triggers copy every change on
    "INSERT INTO t VALUES (200, 200)",
    "DELETE FROM t WHERE id = 3",
    "INSERT LOW_PRIORITY IGNORE INTO `{db}`.`_t_new` (`id`, `v`) SELECT `id`, `v` FROM `{db}`.`t` "
    "FORCE INDEX(`PRIMARY`) WHERE ((`id` >= '61')) AND ((`id` <= '200')) LOCK IN SHARE MODE",
    "RENAME TABLE `{db}`.`t` TO `{db}`.`_t_old`, `{db}`.`_t_new` TO `{db}`.`t`",
    "DROP TABLE IF EXISTS `{db}`.`_t_old`",
    "DROP TRIGGER IF EXISTS `{db}`.`pt_osc_{db}_t_del`",
    "DROP TRIGGER IF EXISTS `{db}`.`pt_osc_{db}_t_upd`",
    "DROP TRIGGER IF EXISTS `{db}`.`pt_osc_{db}_t_ins`",
    "INSERT INTO t VALUES (300, 30000000000, 3.25)",
]


@pytest.mark.parametrize("behavior", ["evolve", "lenient"])
@pytest.mark.parametrize(("tool", "statements"), [("gh-ost", GH_OST), ("pt-osc", PT_OSC)])
@pytest.mark.parametrize("shadow_selected", [False, True])
def test_an_online_schema_change_cut_over_is_exact_without_a_backfill(
    mariadb: PrivateMariaDB,
    database: str,
    tmp_path: Path,
    spark: Any,
    behavior: str,
    tool: str,
    statements: list[str],
    shadow_selected: bool,
) -> None:
    """The tools' own statement sequences; the shadow table inside `source.tables` or not (binlake
    captures a selected table's shadows either way): after the cut-over `t` has its new schema and
    exactly its rows, no shadow sink table is left, and nothing needed a backfill."""
    config = _config(mariadb, database, tmp_path, behavior)
    config = _only(mariadb, config, rf"{database}\..*" if shadow_selected else rf"{database}\.t")
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    mariadb.execute("INSERT INTO t SELECT seq, seq * 1000 FROM seq_1_to_150", database=database)
    run_stream(config, spark, until_caught_up=True)
    # the application writes on through the copy and the cut-over (keys the statements do not insert)
    with concurrent_writes(mariadb, database, keys=range(1, 151)):
        mariadb.execute(*(s.format(db=database) for s in statements), database=database)
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    assert _sink_tables(config, database) == ["t"], tool
    columns = [c.name for c in discover_tables(config)[0].columns]
    assert _sink_columns(config, TableId(database, "t"))[: len(columns)] == columns


@pytest.mark.parametrize("behavior", ["evolve", "lenient"])
def test_swaps_and_replaced_tables_are_exact(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, behavior: str
) -> None:
    """A three-way swap through a name outside `source.tables`; CREATE OR REPLACE; DROP + CREATE
    (under lenient too: the replaced table's rows are gone on the source)."""
    config = _only(mariadb, _config(mariadb, database, tmp_path, behavior), rf"{database}\.(a|b|c|d)")
    mariadb.execute(
        "CREATE TABLE b (id INT PRIMARY KEY, w VARCHAR(5))",
        "CREATE TABLE c (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE d (id INT PRIMARY KEY, v INT)",
        database=database,
    )
    _start(mariadb, database, config, spark, "CREATE TABLE a (id INT PRIMARY KEY, v INT)")
    mariadb.execute(
        "INSERT INTO a VALUES (1, 1), (2, 2)",
        "INSERT INTO b VALUES (1, 'b1')",
        "INSERT INTO c VALUES (1, 1), (2, 2)",
        "INSERT INTO d VALUES (1, 1)",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    mariadb.execute(
        "RENAME TABLE a TO tmp, b TO a, tmp TO b",
        "INSERT INTO a VALUES (2, 'a2')",
        "INSERT INTO b VALUES (3, 3)",
        "CREATE OR REPLACE TABLE c (id INT PRIMARY KEY, s VARCHAR(3))",
        "INSERT INTO c VALUES (9, 'new')",
        "DROP TABLE d",
        "CREATE TABLE d (id BIGINT PRIMARY KEY, s VARCHAR(3))",
        "INSERT INTO d VALUES (5, 'd5')",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    assert _sink_tables(config, database) == ["a", "b", "c", "d"]


#: Columns added to a table with rows: the server fills every row it held, without a row event.
DEFAULTS = [
    "ALTER TABLE t ADD COLUMN tier VARCHAR(8) DEFAULT 'basic'",  # a literal
    "UPDATE t SET tier = 'gold' WHERE id % 10 = 0",
    "INSERT INTO t (id, v, tier) VALUES (1001, 1, NULL), (1002, 2, 'x')",  # an explicit NULL stays
    "ALTER TABLE t ADD COLUMN n INT NOT NULL, ADD COLUMN s VARCHAR(5) NOT NULL",  # implicit 0 and ''
    "ALTER TABLE t ADD COLUMN e ENUM('low', 'high') NOT NULL AFTER id",  # implicit: the first member
    "UPDATE t SET n = 7, e = 'high' WHERE id <= 20",
    "DELETE FROM t WHERE id BETWEEN 30 AND 40",
    "ALTER TABLE t ADD COLUMN since TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP",  # the statement's time
    "ALTER TABLE t ADD COLUMN price DECIMAL(6,2) DEFAULT 1.50 FIRST, ADD COLUMN f DOUBLE DEFAULT -2.5e3",
    "INSERT INTO t (id, v, n, s, e) VALUES (1003, 3, 1, 'a', 'low')",
    "UPDATE t SET price = NULL WHERE id = 50",
    # the current time in the session's time zone, to the microsecond the event holds
    "SET time_zone = '+05:30'",
    "ALTER TABLE t ADD COLUMN seen DATETIME DEFAULT CURRENT_TIMESTAMP",
    "ALTER TABLE t ADD COLUMN seen6 DATETIME(6) NOT NULL DEFAULT NOW(6), "
    "ADD COLUMN at3 TIMESTAMP(3) NULL DEFAULT CURRENT_TIMESTAMP(3)",
    "UPDATE t SET seen = '2001-02-03 04:05:06' WHERE id = 60",
    "SET time_zone = 'SYSTEM'",
    "ALTER TABLE t ADD COLUMN day DATE DEFAULT (CURDATE()), ADD COLUMN wide DATETIME(6) DEFAULT NOW(2)",
    "INSERT INTO t (id, v, n, s, e) VALUES (1004, 4, 1, 'b', 'low')",
]


@pytest.mark.parametrize("behavior", ["evolve", "lenient"])
def test_added_columns_hold_the_values_the_server_gave_existing_rows(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, behavior: str
) -> None:
    """Each kind of default an ADD COLUMN fills existing rows with, between writes, in one catch-up:
    the sink holds the server's values (a NULL written on purpose stays NULL)."""
    config = _config(mariadb, database, tmp_path, behavior)
    _start(mariadb, database, config, spark, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    mariadb.execute("INSERT INTO t SELECT seq, seq FROM seq_1_to_300", database=database)
    run_stream(config, spark, until_caught_up=True)
    mariadb.execute(*DEFAULTS, database=database)
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    rows = {r["id"]: r for r in sink_rows(config, TableId(database, "t"))}
    assert rows[1]["tier"] == "basic"
    assert rows[10]["tier"] == "gold"
    assert rows[1001]["tier"] is None
    assert (rows[100]["n"], rows[100]["s"], rows[100]["e"], rows[100]["price"]) == (0, "", "low", 1.5)
    assert len({r["since"] for r in rows.values()}) <= 2  # one statement's time (a second may pass)
    first = rows[1]
    assert first["seen6"].microsecond % 1000 or first["at3"].microsecond  # fractions, not zeros
    since_utc = first["since"].astimezone(dt.UTC).replace(tzinfo=None)  # a TIMESTAMP: an instant
    assert (first["seen"] - since_utc).total_seconds() // 60 in (329, 330)  # +05:30 wall-clock time


def test_a_column_only_the_server_could_fill_stops_the_stream_until_a_backfill(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """A generated column added to a table with rows: its values for those rows are in no event.
    The stream stops at the statement, naming it and the fix, and passes once a backfill read
    after it is staged. On an empty table the same statement needs nothing."""
    mariadb.execute(
        "CREATE TABLE empty (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, seq FROM seq_1_to_100",
        database=database,
    )
    raw = stream_config(mariadb, database, tmp_path, chunk_size=40).model_dump(mode="json")
    raw["source"]["password"] = mariadb.password
    raw["pipeline"]["schema_change_behavior"] = "lenient"  # the default, which stops here too
    raw["stream"]["on_gap"] = "stop"  # for a person to repair (the default heals: test_healing.py)
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    run_stream(config, spark, until_caught_up=True)
    mariadb.execute(
        "ALTER TABLE empty ADD COLUMN n INT AUTO_INCREMENT UNIQUE",
        "UPDATE t SET v = 0 WHERE id = 1",
        "ALTER TABLE t ADD COLUMN twice INT AS (v * 2) STORED",
        "UPDATE t SET v = 5 WHERE id = 2",
        database=database,
    )
    t = TableId(database, "t")
    with pytest.raises(StreamError) as stopped:
        run_stream(config, spark, until_caught_up=True)
    message = str(stopped.value)
    assert f"holds a change of `{t}`" in message
    assert "ADD COLUMN twice" in message
    assert f"binlake backfill --table {t}" in message
    assert {r["id"]: r["v"] for r in sink_rows(config, t)}[1] == 0  # what came before is in
    assert "twice" not in _sink_columns(config, t)  # nothing of the statement
    run_backfill(config, spark, "after-twice", tables=[t.name])
    mariadb.execute("UPDATE t SET v = 9 WHERE id = 3", database=database)
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)


def test_a_type_change_that_rewrote_values_stops_or_heals_and_one_that_could_not_passes(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """``MODIFY`` converts every value the table holds, with no row event: a `DATETIME(3)` made
    `DATETIME(0)` rounds even in a strict session, a smaller integer clips where the session is
    not strict. Each is a gap of the table at the statement (before, the sink kept the old values,
    silently); so do a generated column's new expression and a column made AUTO_INCREMENT (its
    zeros and NULLs numbered). A strict session's narrowing whose values all fit changed nothing: no
    gap."""
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, at DATETIME(3), n INT, note VARCHAR(20), "
        "g INT AS (id * 2) STORED, s INT)",
        "INSERT INTO t (id, at, n, note, s) SELECT seq, '2024-01-01 00:00:00.678' + INTERVAL seq SECOND, "
        "seq * 100, CONCAT('note ', seq), IF(seq % 2, 0, NULL) FROM seq_1_to_60",
        database=database,
    )
    raw = stream_config(mariadb, database, tmp_path, chunk_size=40).model_dump(mode="json")
    raw["source"]["password"] = mariadb.password
    raw["stream"]["on_gap"] = "stop"  # to see each gap (the default heals: below)
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    t = TableId(database, "t")
    mariadb.execute(
        "ALTER TABLE t MODIFY note VARCHAR(15)", "UPDATE t SET n = 1 WHERE id = 1", database=database
    )
    run_stream(config, spark, until_caught_up=True)  # strict (the default), every value fits: no gap
    assert_sink_equals_source(config)

    for session, statement, how in (
        ("SET SESSION sql_mode = DEFAULT", "ALTER TABLE t MODIFY at DATETIME(0)", "rounded to 0 digits"),
        ("SET SESSION sql_mode = ''", "ALTER TABLE t MODIFY n TINYINT", "outside tinyint(4) clipped"),
        (
            "SET SESSION sql_mode = DEFAULT",
            "ALTER TABLE t MODIFY g BIGINT AS (id * 3) STORED",
            "computed again",
        ),
        (
            "SET SESSION sql_mode = DEFAULT",
            "ALTER TABLE t MODIFY s INT NOT NULL AUTO_INCREMENT UNIQUE",
            "given sequence numbers",
        ),
    ):
        in_session(mariadb, database, session, statement, "UPDATE t SET note = 'x' WHERE id = 2")
        with pytest.raises(StreamError) as stopped:
            run_stream(config, spark, until_caught_up=True)
        assert f"holds a change of `{t}`" in str(stopped.value)
        assert how in str(stopped.value)
        run_backfill(config, spark, f"after-{how[:7]}", tables=[t.name])
        run_stream(config, spark, until_caught_up=True)
        assert_sink_equals_source(config)

    # Healed by the stream itself (the default `on_gap`): an ALTER IGNORE that cut strings.
    raw["stream"]["on_gap"] = "backfill"
    config = PipelineConfig.model_validate(raw)
    mariadb.execute("ALTER IGNORE TABLE t MODIFY note VARCHAR(3)", database=database)
    run_stream(config, spark, until_caught_up=True)  # meets the gap, and ends with it healed
    assert_sink_equals_source(config)
    assert {r["note"] for r in sink_rows(config, t)} == {"not", "x"}


def test_rows_the_server_deleted_without_row_events_heal_under_evolve(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """``TRUNCATE PARTITION`` and ``ALTER IGNORE … ADD UNIQUE`` (which deletes the rows it finds
    duplicated) delete rows no row event names: under ``evolve`` the stream heals each table by a
    backfill read after the statement (it stopped, for a person to run that backfill; the second
    it did not see at all: the sink kept the duplicates)."""
    mariadb.execute(
        "CREATE TABLE p (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
        "(PARTITION p0 VALUES LESS THAN (50), PARTITION p1 VALUES LESS THAN MAXVALUE)",
        "INSERT INTO p SELECT seq, seq FROM seq_1_to_100",
        "CREATE TABLE t (id INT PRIMARY KEY, email VARCHAR(20), n INT)",
        "INSERT INTO t SELECT seq, CONCAT('e', seq % 10), seq FROM seq_1_to_30",
        database=database,
    )
    raw = config_dict(stream_config(mariadb, database, tmp_path, chunk_size=40))
    raw["pipeline"]["schema_change_behavior"] = "evolve"
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "ALTER TABLE p TRUNCATE PARTITION p0",
        "ALTER IGNORE TABLE t ADD UNIQUE KEY (email)",
        "UPDATE t SET n = 0 WHERE id = 3",
        "UPDATE p SET v = 0 WHERE id = 60",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)  # ends with both tables healed
    assert_sink_equals_source(config)
    assert len(sink_rows(config, TableId(database, "t"))) == 10
    assert len(sink_rows(config, TableId(database, "p"))) == 51


# -- DDL during the snapshot -----------------------------------------------------------------------


def test_a_table_created_by_a_select_is_healed_and_a_dropped_database_drops_its_tables(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """MariaDB logs ``CREATE TABLE … SELECT`` as one transaction, its ``CREATE`` then its rows: the
    stream saw no statement there, never made the table, and dropped its rows. Now the table is
    made and its rows are a gap at the statement, healed by a backfill — of a copy without a key
    too (split by its integer column) — on a pipeline streaming without a snapshot. ``DROP
    DATABASE`` writes no ``DROP TABLE`` of its tables: under ``evolve`` their sink tables go (they
    stayed, with every row); verify covers the tables the stream made (it left them out)."""
    other = f"{database}_other"
    raw = config_dict(_config(mariadb, database, tmp_path, "evolve"))
    raw["source"]["tables"] = [rf"{database}(_other)?\..*"]
    config = PipelineConfig.model_validate(raw)
    mariadb.execute(f"CREATE DATABASE {other}", f"CREATE TABLE {other}.gone (id INT PRIMARY KEY)")
    _start(mariadb, database, config, spark, TABLE)
    mariadb.execute(
        f"INSERT INTO {other}.gone VALUES (1), (2)",
        "INSERT INTO t VALUES (1, 1, 'one', 10), (2, 2, 'two', 20), (3, NULL, 'three', 30)",
        "CREATE TABLE copy AS SELECT b, a, id FROM t",  # no key: split by `a` (NULL in the first chunk)
        "CREATE TABLE keyed (PRIMARY KEY (id)) AS SELECT id, b FROM t WHERE id < 3",
        "UPDATE copy SET b = 'ONE' WHERE id = 1",
        "DELETE FROM keyed WHERE id = 2",
        f"DROP DATABASE {other}",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    assert sorted(r["b"] for r in sink_rows(config, TableId(database, "copy"))) == ["ONE", "three", "two"]
    assert not open_catalog(config).table_exists(sink_name(config, TableId(other, "gone")))
    report = verify(config, "v1")
    assert {t.table for t in report.tables} == {f"{database}.{n}" for n in ("t", "copy", "keyed")}
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}


@pytest.mark.parametrize("behavior", ["lenient", "evolve"])
def test_a_not_null_or_sort_column_dropped_keeps_the_stream_going(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, behavior: str
) -> None:
    """Under ``lenient`` (the default) a dropped or renamed column stays, null from then on: one the
    source had NOT NULL refused the nulls, and the stream failed at every run ("declared
    non-nullable but contains nulls"). Under ``evolve`` a column the layout rule sorts by is
    dropped, the sort order left without it (pyiceberg refused the drop)."""
    raw = config_dict(_config(mariadb, database, tmp_path, behavior))
    raw["sink"]["layout"] = [{"source_table": rf"{database}\.t", "sort_by": ["a DESC", "id"]}]
    config = PipelineConfig.model_validate(raw)
    _start(
        mariadb,
        database,
        config,
        spark,
        "CREATE TABLE t (id INT PRIMARY KEY, a INT NOT NULL, b INT NOT NULL)",
    )
    mariadb.execute(
        "INSERT INTO t VALUES (1, 1, 1), (2, 2, 2)",
        "ALTER TABLE t DROP COLUMN a",
        "INSERT INTO t VALUES (3, 3)",
        "ALTER TABLE t RENAME COLUMN b TO c",
        "INSERT INTO t VALUES (4, 4)",
        "UPDATE t SET c = 10 WHERE id = 1",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    rows = {r["id"]: r for r in sink_rows(config, TableId(database, "t"))}
    if behavior == "evolve":
        assert_sink_equals_source(config)
        assert _sink_columns(config, TableId(database, "t")) == ["id", "c"]
    else:  # kept, null in the rows written after their drop (rows not written since keep theirs)
        assert rows == {
            1: {"id": 1, "a": None, "b": None, "c": 10},
            2: {"id": 2, "a": 2, "b": 2, "c": None},
            3: {"id": 3, "a": None, "b": 3, "c": None},
            4: {"id": 4, "a": None, "b": None, "c": 4},
        }


@pytest.mark.parametrize("behavior", ["try_evolve", "ignore"])
def test_a_not_null_column_the_sink_keeps_takes_the_nulls_it_gets(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, behavior: str
) -> None:
    """A NOT NULL column that stays in the sink while rows no longer fill it — a partition column's
    drop Iceberg refuses under ``try_evolve``, any drop or type change under ``ignore`` — is made
    optional: it refused the nulls and the stream failed at every run. The values that no longer
    fit are the behaviours' (null: verify names the drift)."""
    raw = config_dict(_config(mariadb, database, tmp_path, behavior))
    raw["sink"]["layout"] = [{"source_table": rf"{database}\.t", "partition_by": ["day(at)"]}]
    config = PipelineConfig.model_validate(raw)
    table = "CREATE TABLE t (id INT PRIMARY KEY, at DATETIME NOT NULL, n INT NOT NULL)"
    _start(mariadb, database, config, spark, table)
    mariadb.execute(
        "INSERT INTO t VALUES (1, '2026-01-01 10:00:00', 1)",
        "ALTER TABLE t DROP COLUMN at",
        "INSERT INTO t VALUES (2, 2)",
        "ALTER TABLE t MODIFY n VARCHAR(10) NOT NULL",
        "INSERT INTO t VALUES (3, 'three')",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    rows = {r["id"]: r for r in sink_rows(config, TableId(database, "t"))}
    assert rows == {
        1: {"id": 1, "at": dt.datetime(2026, 1, 1, 10), "n": 1},
        2: {"id": 2, "at": None, "n": 2},
        3: {"id": 3, "at": None, "n": None},  # 'three' fits no int
    }
