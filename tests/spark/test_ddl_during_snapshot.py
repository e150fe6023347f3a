"""Table statements while a snapshot reads, end to end: ALTER, TRUNCATE, RENAME and a kill -9
around them; the stream after the snapshot, then the sink equals the source.

A statement lies before a table's chunk reads (the snapshot holds it: the stream neither applies
it again nor decodes the table's older rows), among them (the table is read again), or after them
(the stream applies it). ``snapshot.spans`` says why.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.faults import VARIABLE
from binlake.planner import discover_tables, plan
from binlake.sink.catalog import open_catalog, sink_identifier, sink_name
from binlake.snapshot.progress import SnapshotReport
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.state.store import StateStore
from binlake.testing.compare import bag, replay_changelog, source_rows
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import (
    ROOT,
    assert_sink_equals_source,
    concurrent_writes,
    stream_config,
    write_config_file,
)

pytestmark = pytest.mark.slow

#: A schema change and writes after it, in rows of chunks read before and after it.
DURING_SNAPSHOT = [
    "ALTER TABLE t ADD COLUMN tag VARCHAR(5) DEFAULT 'x', MODIFY v BIGINT",
    "UPDATE t SET tag = 'late', v = v + 5000000000 WHERE id > 300",  # rows of chunks not read yet
    "DELETE FROM t WHERE id = 7",
]
#: The table emptied and filled again, over the whole key range.
TRUNCATED = [
    "TRUNCATE TABLE t",
    # REPLACE: the concurrent writes may insert one of these keys between the two statements
    "REPLACE INTO t SELECT seq, -seq FROM seq_1_to_400 WHERE seq % 3 = 0",
]


def _snapshotted(
    mariadb: PrivateMariaDB,
    database: str,
    tmp_path: Path,
    tables: tuple[str, ...] = ("t",),
    behavior: str = "lenient",
    modes: dict[str, list[str]] | None = None,
) -> PipelineConfig:
    """Planned tables of 400 rows in 16 chunks each, read one chunk per task: Spark jobs of at most
    8 chunks (parallelism × 4 × 1), the table's last chunk beside the first 8."""
    for table in tables:
        mariadb.execute(
            f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT)",
            f"INSERT INTO {table} SELECT seq, seq FROM seq_1_to_400",
            database=database,
        )
    raw = stream_config(mariadb, database, tmp_path, chunk_size=25).model_dump(mode="json")
    raw["source"]["password"] = mariadb.password
    raw["pipeline"]["snapshot_chunks_per_task"] = 1
    raw["pipeline"]["schema_change_behavior"] = behavior
    raw["sink"]["modes"] = [
        {"source_table": rf"{database}\.{t}", "mode": m} for t, m in (modes or {}).items()
    ]
    config = PipelineConfig.model_validate(raw)
    plan(config)
    return config


def _after_wave(mariadb: PrivateMariaDB, database: str, wave: int, statements: list[str]) -> Any:
    """A progress callback that runs ``statements`` once ``wave`` waves are committed."""
    waves: list[int] = []

    def run(report: SnapshotReport, seconds: float) -> None:
        waves.append(report.chunks_read)
        if len(waves) == wave:
            mariadb.execute(*statements, database=database)

    return run


def _sink_tables(config: PipelineConfig, database: str) -> list[str]:
    namespace = sink_identifier(config, TableId(database, "t"))[0]
    return sorted(name for _, name in open_catalog(config).list_tables(namespace))


def _sink_columns(config: PipelineConfig, table: TableId) -> list[str]:
    catalog = open_catalog(config)
    return [f.name for f in catalog.load_table(sink_name(config, table)).schema().fields]


def _stream_and_compare(mariadb: PrivateMariaDB, database: str, config: PipelineConfig, spark: Any) -> None:
    mariadb.execute("UPDATE t SET v = v + 1 WHERE id % 7 = 0", database=database)  # after the snapshot
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)


def test_a_schema_change_between_two_snapshot_runs_reads_the_table_again(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """A run reads some chunks and stops (a crash, or chunks picked by hand); the table's schema
    changes; the next run reads the table again with its new schema, and the stream is exact."""
    config = _snapshotted(mariadb, database, tmp_path)
    assert not run_snapshot(config, spark, chunk_ids=[f"{database}.t#{i}" for i in range(4)]).complete
    mariadb.execute(*DURING_SNAPSHOT, database=database)
    assert run_snapshot(config, spark).complete
    mariadb.execute("UPDATE t SET tag = 'after' WHERE id = 1", database=database)
    _stream_and_compare(mariadb, database, config, spark)


def test_a_table_read_again_takes_its_changelog_and_history_along(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """A table read again from the start gets its changelog and history anew too (they kept the
    first read's rows under the chunk ids the new split gives again, and missed the new ones);
    one kept without an upsert table (a changelog alone) is read again into a new one."""
    modes = {"t": ["upsert", "changelog", "history"], "u": ["changelog"]}
    config = _snapshotted(mariadb, database, tmp_path, ("t", "u"), modes=modes)
    first = [f"{database}.{t}#{i}" for t in ("t", "u") for i in range(4)]
    assert not run_snapshot(config, spark, chunk_ids=first).complete
    mariadb.execute(*DURING_SNAPSHOT, *(s.replace(" t ", " u ") for s in DURING_SNAPSHOT), database=database)
    assert run_snapshot(config, spark).complete
    _stream_and_compare(mariadb, database, config, spark)
    catalog = open_catalog(config)
    for table, kinds in (("t", ("changelog", "history")), ("u", ("changelog",))):
        (schema,) = [s for s in discover_tables(config) if s.table.table == table]
        expected = bag(source_rows(config, schema))
        for kind in kinds:
            found = catalog.load_table(f"{sink_name(config, schema.table)}_{kind}").scan().to_arrow()
            if kind == "history":
                current = found.filter(pc.equal(found.column("__current__"), True))
                assert bag(current.select(schema.column_names).to_pylist()) == expected
            else:
                assert replay_changelog(found.to_pylist(), list(schema.column_names)) == expected


def test_a_schema_change_while_the_snapshot_reads_reads_the_table_again(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """The DDL lands after the first wave of chunk reads: the next wave's chunks find the table
    changed, nothing of that wave is committed, and the run reads the table again."""
    config = _snapshotted(mariadb, database, tmp_path)
    with concurrent_writes(mariadb, database):
        report = run_snapshot(config, spark, progress=_after_wave(mariadb, database, 1, DURING_SNAPSHOT))
    assert report.complete
    assert report.chunks_read > 16  # the chunks read before the change, then the table again
    _stream_and_compare(mariadb, database, config, spark)
    assert "tag" in _sink_columns(config, TableId(database, "t"))


@pytest.mark.parametrize("behavior", ["evolve", "lenient"])
def test_a_truncate_among_the_chunk_reads_reads_the_table_again(
    behavior: str, mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """TRUNCATE changes no column, so no chunk sees it; the chunks read before it hold rows that
    are gone, those read after it rows the stream must not delete. The binlog over the snapshot's
    span shows it, and the table is read again."""
    config = _snapshotted(mariadb, database, tmp_path, behavior=behavior)
    with concurrent_writes(mariadb, database):
        report = run_snapshot(config, spark, progress=_after_wave(mariadb, database, 1, TRUNCATED))
    assert report.complete
    assert report.chunks_read > 16  # the chunks read before the TRUNCATE, then the table again
    _stream_and_compare(mariadb, database, config, spark)


@pytest.mark.parametrize("behavior", ["evolve", "lenient"])
def test_statements_before_a_table_is_read_are_in_its_snapshot(
    behavior: str, mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Table ``a`` is read first (the stream starts at its first high watermark); then ``t`` is
    written in its old columns, truncated, filled, altered and written in its new ones — all before
    any chunk of ``t`` is read. The stream must skip all of it for ``t`` (its snapshot holds it):
    applied again, the TRUNCATE would empty ``t``'s sink and the ALTER would not fit.

    ``a`` is read by a run of its own: how many chunks the splitter makes of it follows the
    server's row estimate, so a wave of one run could hold chunks of both tables."""
    config = _snapshotted(mariadb, database, tmp_path, ("a", "t"), behavior)
    before_t = [
        "UPDATE t SET v = v * 2 WHERE id < 50",
        "UPDATE a SET v = -v WHERE id % 5 = 0",
        *TRUNCATED,
        *DURING_SNAPSHOT,
        "UPDATE a SET v = 0 WHERE id = 1",
    ]
    with concurrent_writes(mariadb, database, ("a", "t")):
        first = run_snapshot(config, spark, tables=[f"{database}.a"])
        assert first.switch_offset is None  # the premise: t unread, the snapshot unfinished
        mariadb.execute(*before_t, database=database)
        report = run_snapshot(config, spark)
    assert report.complete
    # t met its new schema before any of its chunks was read and was split again; no chunk of it
    # was read twice: every statement lies before its chunk reads.
    assert report.chunks_read == report.tables[f"{database}.t"].chunks
    _stream_and_compare(mariadb, database, config, spark)


def test_a_table_renamed_during_its_snapshot_is_read_under_its_new_name(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """``RENAME TABLE t TO t2`` after a wave: ``t``'s plan and partly read sink table go, ``t2``
    (captured by the same regex) is planned and read; the stream skips the rename."""
    config = _snapshotted(mariadb, database, tmp_path)
    statements = ["RENAME TABLE t TO t2", "UPDATE t2 SET v = 9 WHERE id = 399"]
    with concurrent_writes(mariadb, database, ("t", "t2")):
        report = run_snapshot(config, spark, progress=_after_wave(mariadb, database, 1, statements))
    assert report.complete
    assert _sink_tables(config, database) == ["t2"]
    mariadb.execute("UPDATE t2 SET v = v + 1 WHERE id % 7 = 0", database=database)
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    assert _sink_tables(config, database) == ["t2"]


def test_a_snapshot_killed_while_it_reads_a_changed_table_again_is_exact_when_rerun(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """kill -9 after the changed table's sink table is replaced and before its new plan is stored:
    the rerun finds the plan's read chunks missing from the new table and reads it all again."""
    config = _snapshotted(mariadb, database, tmp_path)
    assert not run_snapshot(config, spark, chunk_ids=[f"{database}.t#{i}" for i in range(8)]).complete
    mariadb.execute(*DURING_SNAPSHOT, database=database)
    path = write_config_file(tmp_path, config, mariadb)
    env = {"PYTHONPATH": str(ROOT / "include"), VARIABLE: "snapshot-restart"}
    job = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "snapshot.py"), "--config", str(path)],
        capture_output=True, text=True, env={**os.environ, **env}, start_new_session=True, timeout=300,
    )  # fmt: skip
    assert job.returncode == -signal.SIGKILL, job.stderr
    with contextlib.closing(StateStore(config.pipeline.resolved_state_uri)) as store:
        (stored,) = store.plans(config.pipeline.name).load()
    assert stored.finished == 8  # killed before the new plan: the old one says 8 chunks are read
    assert run_snapshot(config, spark).complete
    _stream_and_compare(mariadb, database, config, spark)
