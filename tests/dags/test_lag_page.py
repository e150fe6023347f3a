"""The lag page from a state store (no Airflow, no server): the window's batches and no older one,
each table's state and position (a held-back table at its gap), the plot as inline SVG that
fetches nothing — and the page itself in Debian's Chromium from the file, screenshot kept."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from binlake.airflow.lag_page import lag_view, pipeline_of_dag, render_index, render_page, table_lines
from binlake.config import PipelineSection
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.state.offset_names import STREAM
from binlake.state.repair_ledger import RepairLedger
from binlake.state.store import StateStore
from binlake.state.stream_history import StreamBatch

CHROMIUM = "/usr/bin/chromium"
NOW = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)


def _batch(batch_id: int, ago: dt.timedelta, lag_s: float, changes: dict[str, dict[str, int]]) -> StreamBatch:
    end = BinlogOffset("binlog.000002", 1000 + batch_id)
    rows = sum(n for ops in changes.values() for n in ops.values())
    return StreamBatch("run", batch_id, end, changes, rows, 0.5, lag_s, NOW - ago)


@pytest.fixture
def section(tmp_path: Path) -> PipelineSection:
    section = PipelineSection(name="shop", work_dir=tmp_path / "work")
    section.work_dir.mkdir()
    with StateStore(section.resolved_state_uri) as store:
        history = store.stream_history("shop")
        history.record(_batch(1, dt.timedelta(hours=8), 600.0, {"db.old": {"upserts": 7}}), STREAM)
        history.record(_batch(2, dt.timedelta(hours=5), 120.0, {"db.orders": {"upserts": 30}}), STREAM)
        both = {"db.orders": {"deletes": 2}, "db.customers": {"upserts": 5}}
        history.record(_batch(3, dt.timedelta(hours=2), 40.0, both), STREAM)
        history.record(_batch(4, dt.timedelta(minutes=10), 3.0, {"db.orders": {"upserts": 1}}), STREAM)
        RepairLedger(store, "shop").open(
            TableId("db", "customers"), BinlogOffset("binlog.000002", 1003), "a STATEMENT-format write",
            "heal-db.customers-binlog.000002-1003",
        )  # fmt: skip
    return section


def test_the_page_shows_the_windows_batches_tables_and_a_held_table(section: PipelineSection) -> None:
    view = lag_view(section, 6, now=NOW)
    assert [b.batch_id for b in view.batches] == [2, 3, 4]  # oldest first; batch 1 is 8 h old
    assert view.lag_s == 3.0  # the last batch's (no server head seen: not known to be caught up)
    lines = {line.table: line for line in table_lines(view)}
    assert set(lines) == {"db.orders", "db.customers"}
    assert lines["db.orders"].changes == 33
    assert lines["db.orders"].state == "streaming"
    assert lines["db.orders"].position == "binlog.000002:1004"
    assert lines["db.orders"].last_change == "2026-11-27 11:50:00 UTC"
    assert lines["db.customers"].position == "binlog.000002:1003"  # exact up to its gap
    assert lines["db.customers"].state.startswith("held back (a STATEMENT-format write); healing")

    page = render_page(view, 6)
    assert "<svg" in page
    assert "<script" not in page
    # Nothing is fetched: every link is the page's own (?hours=, #ids of the SVG) or binlake's app.
    refs = re.findall(r'(?:href|src)="([^"]*)"', page)
    assert refs
    assert [r for r in refs if not r.startswith(("?", "#", "/binlake/"))] == []
    assert "tables held back by a gap: db.customers" in page
    assert "<code>db.orders</code>" in page

    index = render_index([view.status])
    assert 'href="/binlake/lag/shop"' in index
    assert "3.0 s" in index


def test_a_window_without_batches_says_so(section: PipelineSection) -> None:
    view = lag_view(section, 1, now=NOW + dt.timedelta(hours=3))
    assert view.batches == []
    assert "No stream batch in the last 1 h." in render_page(view, 1)


def test_a_pipeline_that_never_ran_has_a_page_and_no_state_store_is_made(tmp_path: Path) -> None:
    section = PipelineSection(name="fresh", work_dir=tmp_path / "fresh")
    page = render_page(lag_view(section, 6, now=NOW), 6)
    assert "not started" in page
    assert "No stream batch in the last 6 h." in page
    assert not (tmp_path / "fresh").exists()


def test_dags_map_to_their_pipeline() -> None:
    names = ["shop", "shop_eu"]
    assert pipeline_of_dag("binlake__shop", names) == "shop"
    assert pipeline_of_dag("binlake__shop__backfill", names) == "shop"
    assert pipeline_of_dag("binlake__shop_eu__verify", names) == "shop_eu"
    assert pipeline_of_dag("binlake__shopping", names) is None
    assert pipeline_of_dag("etl_daily", names) is None


def test_the_page_renders_in_chromium_from_its_file(section: PipelineSection, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "lag.html"
    page_file.write_text(render_page(lag_view(section, 6, now=NOW), 6))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        failed: list[str] = []
        page.on("requestfailed", lambda request: failed.append(request.url))
        page.goto(page_file.as_uri())
        plot = page.locator("svg").first
        box = plot.bounding_box()
        page.screenshot(path=str(tmp_path / "lag-page.png"), full_page=True)
        rows = page.locator("tbody tr").all_inner_texts()
        browser.close()
    assert box is not None
    assert box["width"] > 600
    assert box["height"] > 200
    assert failed == []
    assert any("db.orders" in r and "streaming" in r for r in rows), rows
