"""The jobs' metrics textfile without a job: figures as observed, the outcome of a run that ends
and of one that fails, a part's own file, nothing written without a folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from binlake.job_metrics import JobMetrics


def _samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
    }


def test_a_run_writes_its_figures_and_outcome(tmp_path: Path) -> None:
    metrics = JobMetrics("snapshot", "shop", tmp_path)
    with metrics.run():
        metrics.observe({"db.t": 10}, {"db.t": {"planned": 3, "done": 1}})
        running = _samples(tmp_path / "binlake_shop_snapshot.prom")
        metrics.observe({"db.t": 30}, {"db.t": {"planned": 3, "done": 3}})
    assert running[("binlake_snapshot_running", (("part", ""), ("pipeline", "shop")))] == 1
    ended = _samples(tmp_path / "binlake_shop_snapshot.prom")
    labels = (("part", ""), ("pipeline", "shop"), ("table", "db.t"))
    assert ended[("binlake_snapshot_rows", labels)] == 30
    assert ended[("binlake_snapshot_chunks", (*labels[:2], ("state", "done"), labels[2]))] == 3
    assert ended[("binlake_snapshot_running", (("part", ""), ("pipeline", "shop")))] == 0
    assert ended[("binlake_snapshot_success", (("part", ""), ("pipeline", "shop")))] == 1


def test_a_failed_run_says_so_and_a_part_has_its_own_file(tmp_path: Path) -> None:
    metrics = JobMetrics("snapshot", "shop", tmp_path, part="of 2 chunks a…b")
    with pytest.raises(RuntimeError), metrics.run():
        raise RuntimeError("a task failed")
    [path] = tmp_path.glob("*.prom")
    assert path.name.startswith("binlake_shop_snapshot_")
    found = _samples(path)
    [(part, _)] = [k[1][0] for k in found if k[0] == "binlake_snapshot_success"]
    assert part == "part"
    assert [v for k, v in found.items() if k[0] == "binlake_snapshot_success"] == [0]


def test_without_a_folder_nothing_is_written(tmp_path: Path) -> None:
    metrics = JobMetrics("verify", "shop", None)
    with metrics.run():
        metrics.observe({"db.t": 1}, {})
    assert list(tmp_path.iterdir()) == []
