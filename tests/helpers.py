"""Helpers for tests: run the CLI as a user would, build pipeline configs for a private server."""

from __future__ import annotations

import contextlib
import html
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

from binlake.config import PipelineConfig, SourceConfig
from binlake.offsets import BinlogOffset
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import server_version
from binlake.testing.private_server import PrivateMariaDB

BIN = Path(sys.executable).parent
#: The project's folder (jobs/, include/ …).
ROOT = Path(__file__).parents[1]


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_binlake(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> CliResult:
    """Run the installed ``binlake`` console script as a user would."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [str(BIN / "binlake"), *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def config_dict(config: PipelineConfig) -> dict[str, Any]:
    """``config`` as the YAML a user writes, its source password in clear (a dump hides it): to
    change a setting and validate again, or write the file a process reads."""
    raw = config.model_dump(mode="json", exclude_none=True)
    raw["source"]["password"] = config.source.password.get_secret_value()
    return raw


def pipeline_dict(
    server: PrivateMariaDB,
    tables: list[str],
    work_dir: Path,
    *,
    user: str | None = None,
    password: str | None = None,
    port: int | None = None,
    **source: Any,
) -> dict[str, Any]:
    """A pipeline config (as a dict) that captures ``tables`` from ``server``."""
    return {
        "pipeline": {"name": "test", "work_dir": str(work_dir), "spark": {"master": "local[2]"}},
        "source": {
            "hostname": "127.0.0.1",
            "port": server.port if port is None else port,
            "username": user or server.user,
            "password": server.password if password is None else password,
            "tables": tables,
            **source,
        },
    }


def source_config(server: PrivateMariaDB, database: str, **options: Any) -> SourceConfig:
    """A source section for ``database`` on a private server, as the CDC user."""
    return SourceConfig(
        hostname="127.0.0.1",
        port=server.port,
        username=server.user,
        password=server.password,  # type: ignore[arg-type]
        tables=[rf"{database}\..*"],
        **options,
    )


def binlog_range(
    server: PrivateMariaDB, database: str, setup: Sequence[str], statements: Sequence[str]
) -> tuple[BinlogOffset, BinlogOffset]:
    """The binlog range (start, end] that ``statements`` wrote, in one session after ``setup``."""
    with contextlib.closing(server.admin_connection(database)) as conn, conn.cursor() as cur:
        for statement in setup:
            cur.execute(statement)
        start = current_offset(conn, server_version(conn))
        for statement in statements:
            cur.execute(statement)
        conn.commit()
        end = current_offset(conn, server_version(conn))
    return BinlogOffset(start.file, start.pos), BinlogOffset(end.file, end.pos)


def config_for(
    server: PrivateMariaDB, database: str, tmp_path: Path, tables: list[str] | None = None, **source: Any
) -> PipelineConfig:
    """A snapshot-only pipeline of ``database``'s tables (``page_views`` chunked by customer)."""
    chunk_keys = {f"{database}.page_views": "customer_id", **source.pop("chunk_key_columns", {})}
    raw = pipeline_dict(
        server, tables or [rf"{database}\..*"], tmp_path / "work", chunk_key_columns=chunk_keys, **source
    )
    raw["pipeline"]["parallelism"] = 2
    raw["source"]["startup_mode"] = "snapshot"
    return PipelineConfig.model_validate(raw)


def stream_config(
    server: PrivateMariaDB, database: str, tmp_path: Path, stream: dict[str, Any] | None = None, **source: Any
) -> PipelineConfig:
    """A snapshot-then-stream pipeline (``startup_mode`` as given, ``initial`` by default) with
    1 s triggers and small segments."""
    mode = source.pop("startup_mode", "initial")
    config = config_for(server, database, tmp_path, **source)
    raw = config_dict(config)
    raw["source"]["startup_mode"] = mode
    raw["stream"] = {"trigger_interval_s": 1, "segment_bytes": 4096, **(stream or {})}
    return PipelineConfig.model_validate(raw)


def routed_config(
    server: PrivateMariaDB,
    database: str,
    tmp_path: Path,
    modes: tuple[str, ...] = (),
    upsert: bool = True,
    **pipeline: Any,
) -> PipelineConfig:
    """``stream_config`` (chunks of 80 rows) with the tables ``orders_<n>`` routed into
    ``ods.orders``, keeping ``modes`` beside it (``changelog``, ``history``, ``soft_delete``; without
    the upsert table unless ``upsert``) and ``pipeline`` settings (``schema_change_behavior``)."""
    raw = config_dict(stream_config(server, database, tmp_path, chunk_size=80))
    raw["pipeline"].update(pipeline)
    shards = rf"{database}\.orders_[0-9]+"
    raw["route"] = [{"source_table": shards, "sink_table": "ods.orders"}]
    if modes:
        kept = [m for m in modes if m != "soft_delete"]
        raw["sink"]["modes"] = [
            {
                "source_table": shards,
                "mode": ["upsert", *kept] if upsert else kept,
                "soft_delete": "soft_delete" in modes,
            }
        ]
    return PipelineConfig.model_validate(raw)


def stream_during(config: PipelineConfig, spark: Any, workload: Any, batches: int) -> Any:
    """Run the continuous stream while ``workload`` (started) writes, for ``batches`` micro-batches
    (waited for, not timed); then stop both (the stream between batches) and return the workload's
    stats."""
    from binlake.spark.stream_job import run_stream

    stop = threading.Event()
    done = threading.Semaphore(0)
    stream = threading.Thread(
        target=lambda: run_stream(config, spark, stop=stop, progress=lambda _b, _r: done.release())
    )
    stream.start()
    try:
        for _ in range(batches):
            assert done.acquire(timeout=300)
    finally:
        stats = workload.stop()
        stop.set()  # honoured between batches: once the stream has caught up with the workload
        stream.join(600)
    assert not stream.is_alive()
    return stats


def assert_sink_equals_source(config: PipelineConfig) -> None:
    """Every captured table's rows in the sink equal the source's (as multisets, under the type
    mapping)."""
    from binlake.testing.compare import compare

    results = compare(config)
    assert results
    assert [r for r in results if not r.equal] == []
    assert_readers_agree(config)


def assert_readers_agree(config: PipelineConfig) -> None:
    """Every captured table's state table (its upsert table, or the history or changelog it keeps
    without one) reads the same rows through DuckDB's own iceberg extension as through pyiceberg
    (the reader ``compare`` used)."""
    from binlake.planner import discover_tables
    from binlake.schema.table_rules import table_rules
    from binlake.sink.catalog import open_catalog
    from binlake.testing import duckdb_iceberg
    from binlake.testing.compare import bag

    catalog = open_catalog(config)
    con = duckdb_iceberg.connect()
    names = sorted({table_rules(config, schema.table).state_name for schema in discover_tables(config)})
    for name in names:
        table = catalog.load_table(name)
        duck = bag(duckdb_iceberg.read(table, con).to_pylist())
        assert duck == bag(table.scan().to_arrow().to_pylist()), f"DuckDB reads {name} differently"


def in_session(server: PrivateMariaDB, database: str, setting: str, *statements: str) -> None:
    """Run ``statements`` in one session after ``setting`` (``SET SESSION binlog_format = …``)."""
    with contextlib.closing(server.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute(setting)
        for statement in statements:
            cur.execute(statement)


def write_config_file(tmp_path: Path, config: PipelineConfig, server: PrivateMariaDB) -> Path:
    """``config`` as a YAML file a job can read (with the server's password)."""
    import yaml

    raw = config_dict(config)
    path = tmp_path / "status.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def start_stream_process(
    path: Path, crash_at: str | None, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``jobs/stream.py --until-caught-up`` in a process group of its own, killed by SIGKILL at
    the crash point ``crash_at`` (``binlake.faults``) if given."""
    from binlake.faults import VARIABLE

    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "include"), **(env or {})}
    if crash_at:
        full_env[VARIABLE] = crash_at
    return subprocess.Popen(
        [sys.executable, str(ROOT / "jobs" / "stream.py"), "--config", str(path), "--until-caught-up", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, start_new_session=True,
    )  # fmt: skip


def start_snapshot_process(path: Path) -> subprocess.Popen[bytes]:
    """``jobs/snapshot.py`` in a process group of its own (a test kills or pauses it as a whole)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "include")}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "jobs" / "snapshot.py"), "--config", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
    )  # fmt: skip


def kill_9_at(path: Path, crash_at: str) -> None:
    """Run the stream job until it kills itself at ``crash_at``."""
    import signal

    job = start_stream_process(path, crash_at)
    _, err = job.communicate(timeout=300)  # read as it runs: a full pipe would block its logging
    assert job.returncode == -signal.SIGKILL, err.decode()


@contextlib.contextmanager
def hold_commit(server: PrivateMariaDB, statement: str, hold_s: float = 6.0) -> Iterator[None]:
    """Run ``statement`` in a thread while semi-synchronous replication (``AFTER_SYNC``, no replica)
    holds its commit: written to the binlog, invisible to every reader, for ``hold_s`` seconds.
    Inside the block the commit is in the binlog and not yet visible; after it, it is visible."""
    import threading
    import time

    import pymysql

    before = server.query("SHOW MASTER STATUS")[0][:2]
    server.execute(
        f"SET GLOBAL rpl_semi_sync_master_timeout = {int(hold_s * 1000)}",
        "SET GLOBAL rpl_semi_sync_master_enabled = ON",
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            server.execute(statement)
        except pymysql.err.MySQLError as e:  # surfaced after the block
            errors.append(e)

    writer = threading.Thread(target=run)
    writer.start()
    try:
        deadline = time.monotonic() + 10
        while server.query("SHOW MASTER STATUS")[0][:2] == before:  # until it is in the binlog
            assert time.monotonic() < deadline, "the held commit never reached the binlog"
            time.sleep(0.02)
        yield
    finally:
        server.execute("SET GLOBAL rpl_semi_sync_master_enabled = OFF")
        writer.join(hold_s + 10)
    assert not errors, errors


@contextlib.contextmanager
def concurrent_writes(
    mariadb: PrivateMariaDB, database: str, tables: tuple[str, ...] = ("t",), keys: range = range(1, 421)
) -> Iterator[None]:
    """Random inserts, updates and deletes of ``(id, v)`` rows of ``tables`` (ids from ``keys``) from
    a thread while the block runs: the application that writes on while DDL, a snapshot or a stream
    runs. A statement the table refuses at that moment (renamed away, a value out of a new type's
    range) is skipped."""
    stop = threading.Event()
    done: list[int] = []

    def run() -> None:
        rng = random.Random(7)
        with contextlib.closing(mariadb.admin_connection(database)) as conn:
            with conn.cursor() as cur:
                while not stop.is_set():
                    table, key = rng.choice(tables), rng.choice(keys)
                    statement = rng.choice(
                        [
                            f"UPDATE {table} SET v = v + 1 WHERE id = %s",
                            f"INSERT INTO {table} (id, v) VALUES (%s, 1) ON DUPLICATE KEY UPDATE v = v - 1",
                            f"DELETE FROM {table} WHERE id = %s",
                        ]
                    )
                    try:
                        cur.execute(statement, (key,))
                        done.append(1)
                    except pymysql.err.MySQLError:
                        pass
                    time.sleep(0.002)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not done and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)  # the block starts with the writes under way
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    assert done  # the workload ran


def page_text(page: Path) -> str:
    """A Data Docs page as its visible words."""
    text = re.sub(r"<(script|style).*?</\1>", " ", page.read_text(), flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


def with_metrics_dir(config: PipelineConfig, folder: Path) -> PipelineConfig:
    """``config`` with its jobs' metrics written to ``folder`` (``pipeline.metrics_dir``)."""
    return config.model_copy(update={"pipeline": config.pipeline.model_copy(update={"metrics_dir": folder})})


def job_metric(folder: Path, pipeline: str, job: str, name: str, **labels: str) -> float | None:
    """One sample of a job's metrics file in ``folder`` (its whole run: no ``part``), or None."""
    from prometheus_client.parser import text_string_to_metric_families

    text = (folder / f"binlake_{pipeline}_{job}.prom").read_text()
    wanted = {"pipeline": pipeline, "part": "", **labels}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"binlake_{job}_{name}" and sample.labels == wanted:
                return float(sample.value)
    return None


class Pause:
    """Holds a workload thread between two statements (it calls ``point`` between them) while a
    test records the source's rows and binlog position then (``state``)."""

    def __init__(self) -> None:
        self.asked, self.held, self.go = threading.Event(), threading.Event(), threading.Event()

    def point(self) -> None:
        if self.asked.is_set():
            self.held.set()
            self.go.wait(60)
            self.asked.clear()

    def state(
        self, server: PrivateMariaDB, config: PipelineConfig, tables: tuple[str, ...]
    ) -> tuple[int, dict[str, Counter[Any]]]:
        """The position now (packed) and the rows of ``tables`` (of the pipeline's database) then."""
        from binlake.planner import discover_tables
        from binlake.testing.compare import bag, source_rows

        self.go.clear()
        self.asked.set()
        assert self.held.wait(60)
        file, pos = server.query("SHOW MASTER STATUS")[0][:2]
        schemas = {s.table.table: s for s in discover_tables(config)}
        rows = {t: bag(source_rows(config, schemas[t])) for t in tables}
        self.held.clear()
        self.go.set()
        return BinlogOffset(file, int(pos)).packed, rows


def as_of(table: Any, position: int, columns: list[str], kind: str = "changelog") -> Counter[Any]:
    """A changelog's or history's rows as of ``position`` by the query docs/sink.md gives, run by
    DuckDB's own reader."""
    from binlake.testing import duckdb_iceberg
    from binlake.testing.compare import bag

    text = (ROOT / "docs" / "sink.md").read_text()
    query = text.split(f"<!-- {kind}-as-of-position -->\n```sql\n", 1)[1].split("```", 1)[0]
    query = query.replace(f"${kind}", "?").replace("$position", str(position))
    rows = duckdb_iceberg.connect().execute(query, [table.metadata_location]).to_arrow_table()
    return bag(rows.select(columns).to_pylist())
