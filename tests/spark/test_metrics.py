"""The stream's Prometheus metrics, scraped from the real endpoint while a workload writes: lag,
per-table counts and batch phases move as they should, and the lag falls to 0 once the workload
stops; the textfile (for a stream Airflow runs) holds the same figures."""

from __future__ import annotations

import socket
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from binlake.config import PipelineConfig
from binlake.planner import plan
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from tests.dags.conftest import wait_for
from tests.helpers import config_dict, stream_config

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint: (name, labels) → value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def test_metrics_follow_a_workload_and_the_lag_falls_to_zero(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    demo.load(mariadb.admin_connection, 400, database=database)
    port = _free_port()
    textfile = tmp_path / "textfile" / "binlake.prom"
    base = stream_config(mariadb, database, tmp_path, chunk_size=200,
                         chunk_key_columns={f"{database}.page_views": "customer_id"})  # fmt: skip
    raw = config_dict(base)
    raw["stream"] |= {"metrics_address": f"127.0.0.1:{port}", "metrics_textfile": str(textfile)}
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    url = f"http://127.0.0.1:{port}/metrics"
    stop = threading.Event()
    errors: list[BaseException] = []

    def stream() -> None:
        try:
            run_stream(config, spark, stop=stop)
        except BaseException as e:
            errors.append(e)

    workload = Workload(mariadb.admin_connection, database=database, rate=80, txn_size=2).start()
    thread = threading.Thread(target=stream)
    thread.start()
    try:
        first = wait_for("two batches", lambda: errors or _batches(url) >= 2, timeout=300)
        assert not errors, errors
        assert first
        early = _scrape(url)

        def more_applied() -> Any:
            now = _scrape(url)
            applied = "binlake_stream_changes_applied_total"
            return now if _value(now, applied) > _value(early, applied) else None

        later = wait_for("more changes applied", more_applied, timeout=300)
        assert _value(later, "binlake_stream_changes_applied_total", table=f"{database}.orders") > 0
        assert _value(later, "binlake_stream_changes_read_total") >= _value(
            early, "binlake_stream_changes_read_total"
        )
        for phase in ("read", "prepare", "commit", "state"):
            assert _value(later, "binlake_stream_batch_phase_seconds_count", phase=phase) > 0, phase
        assert ("binlake_stream_lag_seconds", (("pipeline", "test"),)) in later
        assert _value(later, "process_resident_memory_bytes") > 0
        assert _value(later, "binlake_stream_writer_epoch") >= 1
        workload.stop()

        def caught_up() -> Any:  # nothing left to read: no bytes and no seconds behind
            now = _scrape(url)
            lag = (_value(now, "binlake_stream_lag_bytes"), _value(now, "binlake_stream_lag_seconds"))
            return now if lag == (0, 0) else None

        assert wait_for("the lag to fall to 0", caught_up, timeout=300)
    finally:
        workload.stop()
        stop.set()
        thread.join(600)
    assert not errors, errors
    text = textfile.read_text()
    assert "binlake_stream_batches_total" in text
    assert 'binlake_stream_lag_bytes{pipeline="test"} 0.0' in text


def _batches(url: str) -> float:
    try:
        return _value(_scrape(url), "binlake_stream_batches_total")
    except OSError:
        return 0.0  # not listening yet
