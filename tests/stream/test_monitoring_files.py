"""The alert rules and the Grafana dashboard in ``monitoring/`` use only metric names the stream
and the jobs really export (and the rules pass ``promtool check rules`` where Prometheus is installed)."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml
from prometheus_client import generate_latest

from binlake.job_metrics import JobMetrics
from binlake.offsets import BinlogOffset
from binlake.state.stream_history import StreamBatch
from binlake.stream.metrics import StreamMetrics

MONITORING = Path(__file__).parents[2] / "monitoring"
#: Series of other exporters the files use on purpose (Prometheus' own scrape health).
OTHERS = {"up"}


def _exported() -> set[str]:
    metrics = StreamMetrics("p")
    batch = StreamBatch("r", 1, BinlogOffset("b.000001", 4), {"db.t": {"upserts": 1}}, 1, 0.1, 1.0,
                        dt.datetime.now(dt.UTC))  # fmt: skip
    metrics.batch(batch, {"read": 0.1})
    metrics.lag(0)
    text = generate_latest(metrics.registry).decode()
    for job in ("snapshot", "backfill", "verify"):  # the jobs' textfiles (``job_metrics``)
        run = JobMetrics(job, "p", None)
        run.observe({"db.t": 1}, {"db.t": {"drifted": 0}})
        text += generate_latest(run.registry).decode()
    return {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }


def _names(expr: str) -> set[str]:
    """The series an expression reads (metric names, not functions, labels or keywords)."""
    without_labels = re.sub(r"\{[^}]*\}", "", expr)
    words = set(re.findall(r"\b[a-z_][a-z0-9_]*\b(?!\s*\()", without_labels))
    return {w for w in words if w.startswith(("binlake_", "process_")) or w in OTHERS}


def test_alert_rules_read_exported_metrics() -> None:
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    exported = _exported() | OTHERS
    alerts = [r for group in rules["groups"] for r in group["rules"]]
    assert len(alerts) >= 4
    for rule in alerts:
        assert {"alert", "expr", "for", "labels", "annotations"} <= rule.keys(), rule
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert _names(rule["expr"]) <= exported, (rule["alert"], _names(rule["expr"]) - exported)
    if shutil.which("promtool"):
        checked = subprocess.run(["promtool", "check", "rules", str(MONITORING / "alerts.yaml")],
                                 capture_output=True, text=True)  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_queries_exported_metrics() -> None:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exported = _exported() | OTHERS
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert len(exprs) >= 8
    for expr in exprs:
        names = _names(expr)
        assert names, expr
        assert names <= exported, (expr, names - exported)
