"""A transformed table end to end: snapshot, then the stream under changes that move rows across
the filter; the sink equals the transform applied to the source by the server itself
(``SELECT <projection> FROM t WHERE <filter>``), read by pyiceberg and DuckDB's iceberg extension."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import plan
from binlake.quality.checkpoint import run_quality
from binlake.sink.catalog import open_catalog, sink_name
from binlake.source.server.validator import validate
from binlake.spark.backfill_job import run_backfill
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import StreamError, run_stream
from binlake.testing import demo, duckdb_iceberg
from binlake.testing.compare import sink_rows
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from binlake.verify.verification import verify
from tests.helpers import assert_sink_equals_source, config_dict, stream_config, stream_during

PROJECTION = "id, name, UPPER(status) AS status_u, amount * 100 AS cents, CONCAT(name, '/', status) AS label"
FILTER = "status <> 'test' AND amount > 0"
TABLE = (
    "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20), status VARCHAR(10), amount DECIMAL(10,2), "
    "secret VARCHAR(20))"
)


def transformed(config: PipelineConfig, database: str, **stream: Any) -> PipelineConfig:
    raw = config_dict(config)
    raw["transform"] = [
        {"source_table": rf"{database}\.t",
         "projection": f"{PROJECTION}, __op_ts__ AS changed_at, __binlog_position__ AS changed_in, "
                       "__data_event_type__ AS kind",
         "filter": FILTER, "description": "no test rows, no secrets"},
    ]  # fmt: skip
    raw["stream"] = {**raw.get("stream", {}), **stream}
    if stream.get("executor_merge_from") == 0:
        raw["sink"] = {"table_properties": {"write.merge.mode": "merge-on-read"}}
    return PipelineConfig.model_validate(raw)


def expected(mariadb: PrivateMariaDB, database: str) -> list[dict[str, Any]]:
    with contextlib.closing(mariadb.admin_connection()) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {PROJECTION} FROM `{database}`.t WHERE {FILTER} ORDER BY id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def sink(config: PipelineConfig, database: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    table = open_catalog(config).load_table(sink_name(config, TableId(database, "t")))
    by_pyiceberg = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    by_duckdb = sorted(duckdb_iceberg.read(table).to_pylist(), key=lambda r: r["id"])
    return by_pyiceberg, by_duckdb


def without_time(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("changed_at", "changed_in", "kind")} for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize("merge_from", [None, 0], ids=["driver", "executors"])
def test_snapshot_and_stream_of_a_transformed_table_equal_the_servers_transform(
    merge_from: int | None, mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        TABLE,
        "INSERT INTO t SELECT seq, CONCAT('n', seq), ELT(1 + seq % 4, 'ok', 'test', 'TEST', 'new'), "
        "(seq % 9) - 2.5, 'hunter2' FROM seq_1_to_600",
        database=database,
    )
    config = transformed(stream_config(mariadb, database, tmp_path, chunk_size=150), database,
                         executor_merge_from=merge_from)  # fmt: skip
    assert [c for c in validate(config) if c.name == "transform"][-1].status == "ok"
    plan(config)
    assert run_snapshot(config, spark).complete
    pyiceberg_rows, duckdb_rows = sink(config, database)
    assert without_time(pyiceberg_rows) == expected(mariadb, database)
    assert all(r["changed_at"] is None for r in pyiceberg_rows)  # read by the snapshot, not changed
    assert {r["kind"] for r in pyiceberg_rows} == {"+I"}  # as Flink CDC's snapshot emits rows
    assert "secret" not in pyiceberg_rows[0]
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    mariadb.execute(
        "UPDATE t SET status = 'test' WHERE id % 7 = 0",  # out of the filter: deleted in the sink
        "UPDATE t SET status = 'ok' WHERE id % 5 = 0",  # into it: inserted
        "UPDATE t SET amount = -amount WHERE id % 11 = 0",  # both ways
        "UPDATE t SET name = CONCAT(name, '!') WHERE id % 3 = 0",  # computed columns follow
        "UPDATE t SET id = id + 1000 WHERE id BETWEEN 50 AND 60",  # key updates
        "DELETE FROM t WHERE id % 13 = 0",
        "INSERT INTO t SELECT seq, CONCAT('m', seq), IF(seq % 2, 'ok', 'test'), seq, 'x' "
        "FROM seq_2001_to_2200",
        "UPDATE t SET secret = 'changed' WHERE id % 17 = 0",  # only a dropped column changes
        database=database,
    )
    report = run_stream(config, spark, until_caught_up=True)
    assert report.rows > 0
    pyiceberg_rows, duckdb_rows = sink(config, database)
    assert without_time(pyiceberg_rows) == expected(mariadb, database)
    assert duckdb_rows == pyiceberg_rows
    changed = {r["id"]: r["changed_at"] for r in pyiceberg_rows}
    assert changed[2001] is not None
    assert changed[2001] >= started - dt.timedelta(seconds=5)
    untouched = [
        i for i in changed if i <= 600 and all(i % m for m in (3, 5, 7, 11, 13, 17)) and not 50 <= i <= 60
    ]
    assert untouched
    assert all(changed[i] is None for i in untouched)  # as the snapshot read them
    where = {r["id"]: r["changed_in"] for r in pyiceberg_rows}
    assert re.fullmatch(r"[\w-]+\.\d{6}:\d+", where[2001]), where[2001]
    assert all(where[i] is None for i in untouched)
    kind = {r["id"]: r["kind"] for r in pyiceberg_rows}
    assert kind[2001] == "+I"  # inserted
    assert all(kind[i] == "+I" for i in untouched)
    updated = [i for i in kind if i <= 600 and i % 3 == 0]  # their name changed
    assert updated
    assert all(kind[i] == "+U" for i in updated)
    moved = [i for i in kind if 1000 < i < 2000]  # their key updated
    assert moved
    assert all(kind[i] == "+U" for i in moved)
    # binlake verify: the server sums its own projection of the rows its filter keeps; both modes
    # of a sum (MariaDB's consistent snapshot, MySQL's watermarks with the binlog rolled forward).
    for consistent in (True, False):
        report = verify(config, f"transformed-{consistent}", consistent_snapshot=consistent)
        assert {v.status for v in report.verdicts} == {"equal"}, [v.note for v in report.verdicts]
    [checked] = report.tables
    assert checked.not_compared == ["changed_at", "changed_in", "kind"]
    # A backfill re-reads the table through the transform and replaces what the sink lost.
    table = open_catalog(config).load_table(sink_name(config, TableId(database, "t")))
    table.delete("id < 100")
    lost = verify(config, "transformed-lost")
    assert "drifted" in {v.status for v in lost.verdicts}
    run_backfill(config, spark, "transformed", tables=[f"{database}.t"])
    mariadb.execute("UPDATE t SET status = IF(status = 'ok', 'test', 'ok') WHERE id < 40", database=database)
    run_stream(config, spark, until_caught_up=True)
    pyiceberg_rows, duckdb_rows = sink(config, database)
    assert without_time(pyiceberg_rows) == expected(mariadb, database)
    assert duckdb_rows == pyiceberg_rows
    # The row count: the source's rows the filter keeps (the server counts them with it).
    quality = run_quality(config)
    assert quality.success, quality.failures()
    checks = [c for r in quality.results for c in r.results]
    assert not [c for c in checks if c["observed"] == "not checked"], checks


def test_schema_changes_through_a_transform(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        TABLE,
        "INSERT INTO t VALUES (1, 'a', 'ok', 1, 's'), (2, 'b', 'test', 2, 's')",
        database=database,
    )
    config = transformed(stream_config(mariadb, database, tmp_path), database)
    # `binlake validate` compiles each rule against the tables it matches.
    raw = config_dict(config)
    raw["transform"][0]["filter"] = "status > 'm' AND RAND() < 0.5"
    raw["transform"].append({"source_table": r"nowhere\..*", "projection": "id"})
    [error, unused] = [c for c in validate(PipelineConfig.model_validate(raw)) if c.name == "transform"]
    assert (error.status, unused.status) == ("error", "warning")
    assert "`status > 'm'`" in error.message
    assert error.fix is not None
    plan(config)
    assert run_snapshot(config, spark).complete
    # A column the projection does not name: the sink does not take it, the stream goes on.
    mariadb.execute(
        "ALTER TABLE t ADD COLUMN extra INT", "ALTER TABLE t DROP COLUMN secret",
        "INSERT INTO t VALUES (3, 'c', 'ok', 3, 7)", database=database,
    )  # fmt: skip
    run_stream(config, spark, until_caught_up=True)
    rows, _ = sink(config, database)
    assert without_time(rows) == expected(mariadb, database)
    assert "extra" not in rows[0]
    # A column the transform reads: the stream stops and names the transform.
    mariadb.execute("ALTER TABLE t DROP COLUMN status", database=database)
    with pytest.raises(
        StreamError, match=r"transform of .*\.t \(no test rows, no secrets\).*`status`"
    ) as stopped:
        run_stream(config, spark, until_caught_up=True)
    assert "Fix:" in str(stopped.value)


def test_a_widened_column_a_transform_reads_widens_its_sink_columns(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """``INT`` to ``BIGINT`` or a longer ``VARCHAR`` of a column the projection and filter read: the
    expressions mean what they did, so the stream goes on, the sink columns over it widened (the
    projected one and the expression's), in the changelog and history too. It stopped, naming the
    transform, as for a change that alters what the expressions mean (above)."""
    mariadb.execute(
        "CREATE TABLE w (id INT PRIMARY KEY, note VARCHAR(20), n INT)",
        "INSERT INTO w SELECT seq, CONCAT('note ', seq), seq FROM seq_1_to_30",
        database=database,
    )
    raw = config_dict(stream_config(mariadb, database, tmp_path))
    raw["pipeline"]["schema_change_behavior"] = "evolve"
    raw["transform"] = [
        {"source_table": rf"{database}\.w", "projection": "id, note, n * 2 AS twice", "filter": "n > 5"}
    ]
    raw["sink"]["modes"] = [{"source_table": rf"{database}\.w", "mode": ["upsert", "changelog", "history"]}]
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "ALTER TABLE w MODIFY n BIGINT, MODIFY note VARCHAR(40)",
        "UPDATE w SET n = 3000000000, note = REPEAT('y', 30) WHERE id = 12",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    rows = {r["id"]: r for r in sink_rows(config, TableId(database, "w"))}
    assert (rows[12]["twice"], rows[12]["note"]) == (6_000_000_000, "y" * 30)
    assert len(rows) == 25
    report = verify(config, "v1")
    assert {v.status for t in report.tables for v in t.verdicts} == {"equal"}


def test_a_table_renamed_out_of_its_transform_stops_the_stream(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        TABLE,
        "INSERT INTO t VALUES (1, 'a', 'ok', 1, 's')",
        database=database,
    )
    config = transformed(stream_config(mariadb, database, tmp_path), database)
    plan(config)
    assert run_snapshot(config, spark).complete
    # The sink table holds the rule's projection; under its new name the table has no rule.
    mariadb.execute(
        "RENAME TABLE t TO t_all", "INSERT INTO t_all VALUES (2, 'b', 'ok', 2, 's')", database=database
    )
    with pytest.raises(StreamError, match=r"renamed to .*t_all.*different `transform` rules") as stopped:
        run_stream(config, spark, until_caught_up=True)
    assert "Fix:" in str(stopped.value)
    rows, _ = sink(config, database)
    assert [r["id"] for r in rows] == [1]  # nothing of the renamed table's rows


#: Transforms of the demo's tables whose filters the workload's updates cross both ways (orders
#: are cancelled and paid again, customers made inactive and active).
DEMO_TRANSFORMS = [
    {
        "source_table": r".*\.orders",
        "projection": "id, customer_id, status, total * 100 AS total_cents, UPPER(currency) AS currency, "
        "ordered_at, __op_ts__ AS changed_at",
        "filter": "status <> 'cancelled' AND total > 0",
    },
    {
        "source_table": r".*\.customers",
        "projection": "id, country, is_active, loyalty_points",
        "filter": "is_active",
    },
]


@pytest.mark.slow
def test_a_workload_moving_rows_across_filters_while_the_stream_runs(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    demo.load(mariadb.admin_connection, 3000, database=database)
    raw = stream_config(mariadb, database, tmp_path, chunk_size=500).model_dump(
        mode="json", exclude_none=True
    )
    raw["source"]["password"] = mariadb.password
    raw["transform"] = DEMO_TRANSFORMS
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    workload = Workload(mariadb.admin_connection, database=database, rate=150, txn_size=3).start()
    stats = stream_during(config, spark, workload, batches=3)
    assert stats.total > 200
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)  # every table, the transformed ones through their rules
    # And by the server's own evaluation of the orders' rule.
    columns = "id, customer_id, status, total * 100 AS total_cents, UPPER(currency) AS currency, ordered_at"
    with contextlib.closing(mariadb.admin_connection()) as conn, conn.cursor() as cur:
        cur.execute(
            f"SELECT {columns} FROM `{database}`.orders WHERE status <> 'cancelled' AND total > 0 ORDER BY id"
        )
        names = [d[0] for d in cur.description]
        expected_orders = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    orders = open_catalog(config).load_table(sink_name(config, TableId(database, "orders")))
    stored = sorted(orders.scan().to_arrow().drop_columns(["changed_at"]).to_pylist(), key=lambda r: r["id"])
    assert stored == expected_orders


def test_the_server_is_sent_the_filter_the_stream_evaluates(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """`v > 0 /*! OR 1=1 */`: sqlglot reads a comment where the server runs `OR 1=1`. verify and
    the row count send the server SQL rendered from the stream's own parse, so all agree."""
    from binlake.schema.transform_sql import filter_sql

    assert filter_sql("v > 0 /*! OR 1=1 */", "t") == "v > 0"
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, CAST(seq % 5 AS SIGNED) - 2 FROM seq_1_to_200",
        database=database,
    )
    raw = stream_config(mariadb, database, tmp_path, chunk_size=50).model_dump(mode="json", exclude_none=True)
    raw["source"]["password"] = mariadb.password
    raw["transform"] = [{"source_table": rf"{database}\.t", "filter": "v > 0 /*! OR 1=1 */"}]
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    table = open_catalog(config).load_table(sink_name(config, TableId(database, "t")))
    assert len(table.scan().to_arrow()) == 80  # v in (1, 2): two of every five rows
    run_stream(config, spark, until_caught_up=True)
    report = verify(config, "comment")
    assert {v.status for v in report.verdicts} == {"equal"}, [v.note for v in report.verdicts]
    quality = run_quality(config)
    assert quality.success, quality.failures()
