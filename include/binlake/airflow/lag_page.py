"""The lag page: a pipeline's stream lag over the last hours and where each of its tables stands,
in the Airflow UI (a "Lag" tab on the pipeline's DAG pages, and a page listing every pipeline).

Read from the state store only (``status.pipeline_status`` and the stream's batch history), so the
page is cheap enough to refresh itself. The plot is inline SVG drawn by matplotlib on the API
server: no script and nothing fetched when the page is viewed, so it renders without internet and
inside the UI's sandboxed frame.
"""

# No ``from __future__ import annotations``: FastAPI reads the routes' annotations as objects.
import datetime as dt
import html
import io
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jinja2

from binlake.airflow.page_access import PREFIX, may_read_dag, pipeline_names, pipeline_section
from binlake.config import PipelineSection
from binlake.state.store import StateStore
from binlake.state.stream_history import STREAM_HISTORY, StreamBatch
from binlake.status import (
    PipelineStatus,
    RepairStatus,
    TableStatus,
    pipeline_status,
    status_in,
    stream_problems,
)

if TYPE_CHECKING:
    from fastapi import FastAPI

#: The windows the page offers, in hours.
WINDOWS = (1, 6, 24, 72)
DEFAULT_HOURS = 6
#: Seconds between the page's own refreshes.
REFRESH_S = 30
#: Bars of the changes plot, at most: one per minute, or per several minutes over long windows.
MAX_BARS = 120


@dataclass(frozen=True)
class TableLine:
    """One table's row on the page."""

    table: str
    state: str
    position: str
    """The binlog position the table's sink is exact at."""
    changes: int
    """Row changes applied within the window."""
    last_change: str


@dataclass(frozen=True)
class LagView:
    """What the page shows of one pipeline."""

    status: PipelineStatus
    batches: list[StreamBatch]
    """The stream's batches within the window, oldest first."""
    start: dt.datetime
    now: dt.datetime

    @property
    def hours(self) -> float:
        return (self.now - self.start).total_seconds() / 3600

    @property
    def lag_s(self) -> float | None:
        """The lag now (``StreamStatus.lag_s``; None: no stream yet)."""
        return self.status.stream.lag_s if self.status.stream is not None else None


def lag_view(section: PipelineSection, hours: float, now: dt.datetime | None = None) -> LagView:
    """The page's figures for the pipeline ``section`` names, over the last ``hours``."""
    now = now or dt.datetime.now(dt.UTC)
    start = now - dt.timedelta(hours=hours)
    if not _ran(section):
        return LagView(_not_started(section.name), [], start, now)
    with StateStore(section.resolved_state_uri) as store:
        status = status_in(store, section.name)
        batches = store.stream_history(section.name).batches(limit=STREAM_HISTORY, since=start)
    return LagView(status, batches[::-1], start, now)


def overview(section: PipelineSection) -> PipelineStatus:
    """The pipeline's status for the index (its lag now, without the batches of a window)."""
    return pipeline_status(section) if _ran(section) else _not_started(section.name)


def _ran(section: PipelineSection) -> bool:
    """Whether the pipeline has a state store: nothing a page view would make and leave behind."""
    return section.state_uri is not None or (section.work_dir.resolve() / "state.db").exists()


def _not_started(name: str) -> PipelineStatus:
    return PipelineStatus(pipeline=name, tables=[], switch_offset=None, stream=None, schema_changes=[],
                          quality=None, backfills=[])  # fmt: skip


def table_lines(view: LagView) -> list[TableLine]:
    """Each table the pipeline planned or streams since, changed in the window or holds back, by name."""
    status = view.status
    held = {r.table: r for r in status.repairs}
    plans = {t.table: t for t in status.tables}
    changes: Counter[str] = Counter()
    last: dict[str, StreamBatch] = {}
    for batch in view.batches:
        for table, ops in batch.changes.items():
            changes[table] += sum(ops.values())
            last[table] = batch
    return [
        TableLine(
            name,
            *_where(plans.get(name), held.get(name), status),
            changes[name],
            _when(last[name].finished_at) if name in last else "",
        )
        for name in sorted({*plans, *changes, *held})
    ]


def _where(plan: TableStatus | None, held: RepairStatus | None, status: PipelineStatus) -> tuple[str, str]:
    """A table's state and the position its sink is exact at."""
    if held is not None:
        how = "healing: the stream reads" if held.healing else "waiting for"
        return f"held back ({held.reason}); {how} backfill {held.backfill_id}", held.since
    if plan is not None and plan.finished_chunks < plan.chunks:
        return f"snapshot: {plan.finished_chunks} of {plan.chunks} chunks", plan.max_high_watermark
    if status.stream is not None:
        return "streaming", _offset_text(status.stream.offset)
    return "snapshot done", plan.max_high_watermark if plan else ""


def _when(at: dt.datetime | str | None) -> str:
    if at is None:
        return ""
    moment = dt.datetime.fromisoformat(at) if isinstance(at, str) else at
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def lag_plot(view: LagView) -> str | None:
    """The lag and the changes applied over the window, as an inline ``<svg>`` (None: no batch)."""
    if not view.batches:
        return None
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure

    points = [(b.finished_at, b.lag_s) for b in view.batches if b.lag_s is not None]
    if view.lag_s == 0.0:
        points.append((view.now, 0.0))  # caught up: nothing is behind now
    fig = Figure(figsize=(10, 4.4), layout="constrained")
    lag_ax, changes_ax = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    if points:
        times, lags = zip(*points, strict=True)
        # Samples joined by lines: between batches the lag is not known (a quiet stream has none).
        lag_ax.plot(times, lags, color="#0b7285", marker="." if len(points) < 60 else "")
    lag_ax.set_ylabel("lag (s)")
    lag_ax.set_ylim(bottom=0)
    lag_ax.grid(alpha=0.3)
    minutes = max(1, int(view.hours * 60 / MAX_BARS + 0.999))
    width = dt.timedelta(minutes=minutes)
    bars: Counter[dt.datetime] = Counter()
    for batch in view.batches:
        slot = int((batch.finished_at - view.start) / width)
        bars[view.start + slot * width] += sum(n for ops in batch.changes.values() for n in ops.values())
    changes_ax.bar(list(bars), list(bars.values()), width=width, align="edge", color="#5c7cfa")
    changes_ax.set_ylabel(f"changes / {minutes} min")
    changes_ax.grid(alpha=0.3)
    changes_ax.set_xlim(view.start, view.now)
    locator = mdates.AutoDateLocator(tz=dt.UTC)  # type: ignore[no-untyped-call]
    changes_ax.xaxis.set_major_locator(locator)
    changes_ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=dt.UTC))  # type: ignore[no-untyped-call]
    changes_ax.set_xlabel("UTC")
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    svg = out.getvalue()
    return svg[svg.index("<svg") :]


_TEMPLATES = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.2rem; color: #1c2430; }
h1 { font-size: 1.3rem; margin: 0 0 .6rem; } h1 a { color: inherit; text-decoration: none; }
.cards { display: flex; gap: .8rem; flex-wrap: wrap; margin-bottom: .8rem; }
.card { border: 1px solid #d0d7de; border-radius: 6px; padding: .5rem .8rem; min-width: 9rem; }
.card b { display: block; font-size: 1.2rem; } .card span { color: #57606a; font-size: .85rem; }
.problem { background: #fff1f0; border: 1px solid #ffa39e; padding: .4rem .8rem; margin: .3rem 0; }
.windows a { margin-right: .6rem; } .windows a.on { font-weight: bold; text-decoration: none; }
table { border-collapse: collapse; margin-top: .8rem; }
th, td { border-bottom: 1px solid #d0d7de; padding: .3rem .7rem; text-align: left; font-size: .9rem; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
svg { max-width: 100%; height: auto; } footer { color: #57606a; font-size: .8rem; margin-top: 1rem; }
"""

_PAGE = _TEMPLATES.from_string(
    """<!doctype html><html><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{{ refresh }}"><title>binlake · {{ s.pipeline }} · lag</title>
<style>{{ style }}</style></head><body>
<h1><a href="{{ prefix }}/lag/">binlake</a> · pipeline <code>{{ s.pipeline }}</code> · lag</h1>
<div class="cards">
 <div class="card"><span>stream</span><b>{{ stream_state }}</b></div>
 <div class="card"><span>lag now</span><b>{{ lag_now }}</b></div>
 <div class="card"><span>applied up to</span><b>{{ applied }}</b></div>
 <div class="card"><span>server's binlog head</span><b>{{ head }}</b></div>
 <div class="card"><span>last batch</span><b>{{ last_batch }}</b></div>
</div>
{% for p in problems %}<div class="problem">{{ p }}</div>{% endfor %}
<div class="windows">last {% for h in windows %}<a href="?hours={{ h }}"{% if h == hours %} class="on"{%
 endif %}>{{ h }} h</a>{% endfor %}</div>
{% if plot %}{{ plot | safe }}{% else %}<p>No stream batch in the last {{ hours }} h.</p>{% endif %}
<table><thead><tr><th>table</th><th>state</th><th>exact up to (binlog)</th>
<th>changes in {{ hours }} h</th><th>last change applied</th></tr></thead><tbody>
{% for t in tables %}<tr><td><code>{{ t.table }}</code></td><td>{{ t.state }}</td>
<td><code>{{ t.position }}</code></td><td class="n">{{ "{:,}".format(t.changes) }}</td>
<td>{{ t.last_change }}</td></tr>{% endfor %}
</tbody></table>
<footer>Read from the pipeline's state store at {{ now }}; this page refreshes every {{ refresh }} s.</footer>
</body></html>"""
)

_INDEX = _TEMPLATES.from_string(
    """<!doctype html><html><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{{ refresh }}"><title>binlake · lag</title>
<style>{{ style }}</style></head><body><h1>binlake · pipelines</h1>
<table><thead><tr><th>pipeline</th><th>stream</th><th>lag now</th><th>applied up to</th></tr></thead><tbody>
{% for p in pipelines %}<tr><td><a href="{{ prefix }}/lag/{{ p.name }}">{{ p.name }}</a></td>
<td>{{ p.state }}</td><td>{{ p.lag }}</td><td><code>{{ p.applied }}</code></td></tr>
{% else %}<tr><td colspan="4">No pipeline you may read.</td></tr>{% endfor %}
</tbody></table></body></html>"""
)


def render_page(view: LagView, hours: int) -> str:
    """The lag page of ``view``'s pipeline."""
    status = view.status
    stream = status.stream
    last = stream.last_batch if stream else None
    return _PAGE.render(
        s=status,
        prefix=PREFIX,
        style=_STYLE,
        refresh=REFRESH_S,
        stream_state=_stream_state(status),
        lag_now=_lag_text(view.lag_s),
        applied=_offset_text(stream.offset) if stream else "not started",
        head=_offset_text(stream.source_head) if stream and stream.source_head else "not seen yet",
        last_batch=_when(last.finished_at) if last else "none yet",
        problems=stream_problems(status, None),
        windows=WINDOWS,
        hours=hours,
        plot=lag_plot(view),
        tables=table_lines(view),
        now=_when(view.now),
    )


def render_index(statuses: list[PipelineStatus]) -> str:
    """Every pipeline the user may read, with its lag now."""
    pipelines = [
        {
            "name": s.pipeline,
            "state": _stream_state(s),
            "lag": _lag_text(s.stream.lag_s if s.stream else None),
            "applied": _offset_text(s.stream.offset) if s.stream else "",
        }
        for s in statuses
    ]
    return _INDEX.render(pipelines=pipelines, prefix=PREFIX, style=_STYLE, refresh=REFRESH_S)


def _stream_state(status: PipelineStatus) -> str:
    if status.stream is None:
        return "not started"
    return "running" if status.stream.running else "not running"


def _lag_text(lag_s: float | None) -> str:
    if lag_s is None:
        return "unknown"
    return "caught up" if lag_s == 0 else f"{lag_s:,.1f} s"


def _offset_text(offset: dict[str, Any]) -> str:
    return f"{offset['file']}:{offset['pos']}"


def pipeline_of_dag(dag_id: str, names: list[str]) -> str | None:
    """The pipeline whose DAGs (``binlake__<name>`` and ``binlake__<name>__<kind>``) include ``dag_id``."""
    for name in names:
        if dag_id == f"binlake__{name}" or dag_id.startswith(f"binlake__{name}__"):
            return name
    return None


def add_lag_routes(app: "FastAPI") -> None:
    """``GET /lag/`` (every pipeline), ``GET /lag/<pipeline>?hours=N`` and ``GET /lag/dag/<dag_id>``
    (the tab the plugin puts on every DAG page)."""
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import HTTPException, Request
    from fastapi.responses import HTMLResponse

    def page(pipeline: str, hours: int, request: Request, user: Any) -> HTMLResponse:
        may_read_dag(request, user, f"binlake__{pipeline}")  # first: a 404 would tell what exists
        section = pipeline_section(pipeline)
        if section is None:
            raise HTTPException(404, f"no pipeline `{pipeline}` (or its config cannot be loaded here)")
        hours = hours if hours in WINDOWS else DEFAULT_HOURS
        return HTMLResponse(render_page(lag_view(section, hours), hours))

    @app.get("/lag/", response_class=HTMLResponse)
    def index(request: Request, user: GetUserDep) -> HTMLResponse:
        statuses = []
        for name in pipeline_names():
            section = pipeline_section(name)
            try:
                may_read_dag(request, user, f"binlake__{name}")
            except HTTPException:
                continue
            if section is not None:
                statuses.append(overview(section))
        return HTMLResponse(render_index(statuses))

    @app.get("/lag/dag/{dag_id}", response_class=HTMLResponse)
    def dag_tab(dag_id: str, request: Request, user: GetUserDep, hours: int = DEFAULT_HOURS) -> HTMLResponse:
        pipeline = pipeline_of_dag(dag_id, pipeline_names())
        if pipeline is None:
            return HTMLResponse(
                f"<p>The DAG <code>{html.escape(dag_id)}</code> is not a binlake pipeline's.</p>"
            )
        return page(pipeline, hours, request, user)

    @app.get("/lag/{pipeline}", response_class=HTMLResponse)
    def pipeline_page(
        pipeline: str, request: Request, user: GetUserDep, hours: int = DEFAULT_HOURS
    ) -> HTMLResponse:
        return page(pipeline, hours, request, user)
