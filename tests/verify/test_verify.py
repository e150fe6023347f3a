"""binlake verify end to end: chunk checksums of the source against the sink rolled forward to the
same binlog position — damage in the sink is found exactly where it is, never elsewhere, while a
workload writes; ``--repair`` backfills what drifted."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.backfill.plan import KeyRange
from binlake.cli import main as cli_main
from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import plan
from binlake.sink.catalog import open_catalog, sink_name
from binlake.source.chunks.splitter import rows_per_chunk
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.state.store import StateStore
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from binlake.verify.verification import VerifyReport, verify
from tests.helpers import (
    assert_sink_equals_source,
    config_dict,
    job_metric,
    stream_config,
    stream_during,
    with_metrics_dir,
)


def sink_table(config: PipelineConfig, table: TableId) -> Any:
    return open_catalog(config).load_table(sink_name(config, table))


def _drifted(report: VerifyReport) -> dict[str, list[tuple[Any, Any]]]:
    found: dict[str, list[tuple[Any, Any]]] = {}
    for v in report.verdicts:
        if v.status == "drifted":
            found.setdefault(v.table.split(".")[1], []).append((v.range.start, v.range.end))
    return found


#: Keys ``damage`` touches, per table (``codes``: a text key, verified whole).
DAMAGED = {"t": [*range(1000, 1010), 2600, 9000], "visits": [7], "codes": ["c7"]}


def _expected(report: VerifyReport) -> dict[str, list[tuple[Any, Any]]]:
    """The chunks holding a damaged key: exactly those must drift."""
    found: dict[str, list[tuple[Any, Any]]] = {}
    for v in report.verdicts:
        table = v.table.split(".")[1]
        inside = [k for k in DAMAGED.get(table, []) if (v.range.start is None or k >= v.range.start)
                  and (v.range.end is None or k < v.range.end)]  # fmt: skip
        assert table != "codes" or v.range.is_all
        if inside:
            found.setdefault(table, []).append((v.range.start, v.range.end))
    return found


def _assert_the_damage_found(report: VerifyReport) -> dict[str, list[tuple[Any, Any]]]:
    """Exactly the chunks ``damage`` hit drifted (several of ``t``, one of the keyless ``visits``,
    the text-keyed ``codes`` whole); returns them by table."""
    drifted = _drifted(report)
    assert drifted == _expected(report)
    assert len(drifted["t"]) >= 3
    assert len(drifted["visits"]) == 1
    assert drifted["codes"] == [(None, None)]
    return drifted


def _statuses(report: VerifyReport) -> set[str]:
    return {v.status for v in report.verdicts}


def _setup(mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any) -> PipelineConfig:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(30), n DECIMAL(10,2), f FLOAT, at DATETIME(6))",
        "INSERT INTO t SELECT seq, CONCAT('v', seq), seq / 7, seq / 3, NOW(6) FROM seq_1_to_3000",
        "CREATE TABLE visits (customer_id INT, b VARCHAR(20))",
        "INSERT INTO visits SELECT seq % 20, 'x' FROM seq_1_to_400",
        "INSERT INTO visits VALUES (NULL, 'n'), (7, 'x')",
        "CREATE TABLE codes (code VARCHAR(10) PRIMARY KEY, n INT) COLLATE utf8mb4_general_ci",
        "INSERT INTO codes SELECT CONCAT('c', seq), seq FROM seq_1_to_50",
        database=database,
    )
    config = stream_config(
        mariadb, database, tmp_path, chunk_size=250, chunk_key_columns={f"{database}.visits": "customer_id"}
    )
    config = with_metrics_dir(config, tmp_path / "metrics")
    plan(config)
    assert run_snapshot(config, spark).complete
    run_stream(config, spark, until_caught_up=True)
    return config


def damage(config: PipelineConfig, database: str) -> None:
    """Rows lost, a changed value, a row the source never had; a keyless table's duplicate lost."""
    t = sink_table(config, TableId(database, "t"))
    t.delete("id >= 1000 and id < 1010")
    row = next(iter(t.scan(row_filter="id == 2600").to_arrow().to_pylist()))
    t.delete("id == 2600")
    t.append(
        pa.Table.from_pylist([{**row, "v": "changed"}, {**row, "id": 9000}], schema=t.schema().as_arrow())
    )
    views = sink_table(config, TableId(database, "visits"))
    views.delete("customer_id == 7")
    views.append(pa.Table.from_pylist([{"customer_id": 7, "b": "x"}] * 20, schema=views.schema().as_arrow()))
    codes = sink_table(config, TableId(database, "codes"))
    codes.delete("code == 'c7'")


def test_verify_finds_exactly_the_damaged_chunks(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _setup(mariadb, database, tmp_path, spark)
    clean = verify(config, "v1")
    assert _statuses(clean) == {"equal"}
    assert len(clean.verdicts) >= 10
    # Changes the stream has not applied yet: the sink is rolled forward to the source's position.
    mariadb.execute(
        "UPDATE t SET v = 'later' WHERE id IN (5, 1500)", "DELETE FROM t WHERE id = 2000",
        "INSERT INTO t VALUES (3001, 'new', 1, 1, NOW(6))", "INSERT INTO visits VALUES (3, 'later')",
        "UPDATE t SET id = 4000 WHERE id = 6",
        database=database,
    )  # fmt: skip
    behind = verify(config, "v2")
    assert _statuses(behind) == {"equal"}

    damage(config, database)
    found = verify(config, "v3")
    drifted = _assert_the_damage_found(found)
    # The verify's metrics textfile: chunks by verdict per sink table, rows compared, its outcome.
    metrics, name, t = tmp_path / "metrics", config.pipeline.name, sink_name(config, TableId(database, "t"))
    assert job_metric(metrics, name, "verify", "chunks", table=t, state="drifted") == len(drifted["t"])
    equal = sum(1 for v in found.verdicts if v.table == f"{database}.t" and v.status == "equal")
    assert job_metric(metrics, name, "verify", "chunks", table=t, state="equal") == equal
    assert job_metric(metrics, name, "verify", "rows", table=t) == next(
        x.rows for x in found.tables if x.sink == t
    )
    assert job_metric(metrics, name, "verify", "success") == 1
    counts = {(v.table.split(".")[1], v.range.start): (v.source_rows, v.sink_rows) for v in found.verdicts}
    lost = next(
        v
        for v in found.verdicts
        if v.status == "drifted"
        and v.range.start is not None
        and v.range.start <= 1000 < (v.range.end or 10**9)
    )
    assert lost.source_rows is not None
    assert lost.sink_rows == lost.source_rows - 10
    assert counts

    # Only the chosen tables and key range.
    narrow = verify(config, "v4", [f"{database}.t"], KeyRange(2000, 3000))
    assert {v.table for v in narrow.verdicts} == {f"{database}.t"}
    assert all(v.range.start is not None and v.range.start >= 2000 for v in narrow.verdicts)
    assert len(_drifted(narrow)["t"]) == 1

    with StateStore(config.pipeline.resolved_state_uri) as store:
        latest = store.verifications(config.pipeline.name).latest()
    assert latest is not None
    assert latest[0] == "v4"


def test_verify_cuts_chunks_of_its_own_bytes_finer_than_the_snapshots(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Without ``source.chunk_size``, the snapshot reads chunks of ``source.chunk_bytes`` and verify
    sums chunks of ``verify.chunk_bytes`` (1 MiB): more of them, each a cheap query, so a drift
    names (and a repair re-reads) a small range."""
    mariadb.execute(
        # Statistics change only by ANALYZE: the split reads AVG_ROW_LENGTH, and so does this test,
        # later (InnoDB's background recalculation once changed it in between: a flake).
        "CREATE TABLE wide (id INT PRIMARY KEY, v VARCHAR(1000)) STATS_PERSISTENT=1 STATS_AUTO_RECALC=0",
        "INSERT INTO wide SELECT seq, REPEAT('x', 900) FROM seq_1_to_12000",
        "ANALYZE TABLE wide",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path)
    assert config.source.chunk_size is None
    plans = plan(config)
    snapshot_chunks = sum(len(p.chunks) for p in plans)
    assert run_snapshot(config, spark).complete
    run_stream(config, spark, until_caught_up=True)
    report = verify(config, "fine")
    assert _statuses(report) == {"equal"}
    (length,) = mariadb.query(
        "SELECT AVG_ROW_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (database, "wide"),
    )[0]
    # The splitter's own rule (at least CHUNK_ROWS[0] rows a chunk): at ~1.2 kB a row the byte
    # target falls just under that floor on some runs (the statistics' row estimate varies).
    rows = rows_per_chunk(config.verify.chunk_bytes, int(length))
    assert len(report.verdicts) == pytest.approx(12000 / rows, abs=1.5)
    assert 2 <= snapshot_chunks < len(report.verdicts) / 4


@pytest.mark.slow
def test_under_a_workload_no_false_drift_then_the_damage_exactly_and_repair(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, write_config: Any, binlake_cli: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    demo.load(mariadb.admin_connection, 8000, database=database)
    config = _setup(mariadb, database, tmp_path, spark)
    raw = config_dict(config)
    path = write_config(raw)
    workload = Workload(mariadb.admin_connection, database=database, rate=80, txn_size=2).start()
    stop = threading.Event()
    stream = threading.Thread(target=lambda: run_stream(config, spark, stop=stop))
    stream.start()
    try:
        # The demo tables change all along (the stream runs behind them): never a false drift.
        for mode in (None, False):  # MariaDB's consistent snapshot, then MySQL's watermarks
            report = verify(config, f"busy-{mode}", consistent_snapshot=mode)
            assert not _drifted(report), report.as_dict()
            if mode is None:  # exact at the snapshot's position: every chunk compared
                assert _statuses(report) == {"equal"}, report.as_dict()
            equal = [v for v in report.verdicts if v.status == "equal"]
            assert len(equal) >= 20
            assert len({v.table for v in equal}) >= 5
        # Damage where the workload does not write (so nothing it does can mend it or hide it,
        # and no commit of the running stream races the damage's own).
        damage(config, database)
        report = verify(config, "damaged")
        drifted = _assert_the_damage_found(report)

        # --repair: the drifted chunks are backfilled, the running stream applies them, and they
        # are verified again.
        # (its own process, as users run it: its Spark session is not the stream's)
        cli = binlake_cli("-c", str(path), "verify", "--repair", "--timeout", "300", "--json")
        summary = json.loads(cli.stdout.strip().splitlines()[-1])
        assert cli.returncode == 0, (summary, cli.stderr[-3000:])
        assert mariadb.password not in cli.stdout + cli.stderr
        assert summary["clean"]
        assert summary["tables"][f"{database}.t"]["repaired"] == len(drifted["t"])
        assert summary["tables"][f"{database}.visits"]["repaired"] == 1
        assert summary["tables"][f"{database}.codes"]["repaired"] == 1  # a whole table, text-keyed
        assert summary["repair_backfill"]
    finally:
        workload.stop()
        stop.set()  # honoured between batches: once the stream has caught up with the workload
        stream.join(600)
    assert not stream.is_alive()
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    assert _statuses(verify(config, "after")) == {"equal"}
    capsys.readouterr()
    assert cli_main(["-c", str(path), "status"]) == 0
    assert "verify after:" in capsys.readouterr().out


@pytest.mark.slow
def test_a_long_merge_on_read_stream_compacting_and_expiring_stays_exact(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 22's in-stream upkeep under a workload: every batch merged on the executors (key
    buckets), compaction, manifest merges and snapshot expiry all happen between batches, and the
    sink still equals the source — by every reader and by binlake verify."""
    demo.load(mariadb.admin_connection, 4000, database=database)
    config = stream_config(
        mariadb, database, tmp_path, chunk_size=500,
        stream={"keep_snapshots": 3, "merge_manifests_at": 4, "executor_merge_from": 0},
    )  # fmt: skip
    raw = config_dict(config)
    raw["sink"]["table_properties"] = {"write.merge.mode": "merge-on-read"}
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    caplog.set_level("INFO", logger="binlake.sink")
    caplog.set_level("INFO", logger="binlake.stream")
    workload = Workload(mariadb.admin_connection, database=database, rate=200, txn_size=3).start()
    stats = stream_during(config, spark, workload, batches=14)
    assert stats.total > 1000
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)  # pyiceberg and DuckDB's own reader
    assert _statuses(verify(config, "long")) == {"equal"}
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "compacted" in messages or "compacting" in messages, messages[-2000:]
    assert "expired" in messages
    assert "merged the" in messages
    assert "merge on executors" in messages  # the batches' phases
    orders = sink_table(config, TableId(database, "orders"))
    # Kept: 3, plus up to a quarter piling up before the next expiry, plus the chunk records.
    unprotected = [
        s for s in orders.metadata.snapshots if "binlake.chunks" not in s.summary.additional_properties
    ]
    assert len(unprotected) <= 3 + 1
