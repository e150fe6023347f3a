"""Data Docs render without internet: a run's report, opened in a real browser (Debian's Chromium
through playwright) with every request off this machine refused, lists the run's validation
results with its styles, scripts and icon fonts loaded from the vendored files. Screenshots are
kept in the test's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.quality import report_assets
from binlake.quality.data_docs import DataDocs
from binlake.quality.expectations import Expectation
from binlake.sink.writer import IcebergWriter
from tests.sink.helpers import create, make_catalog, rows

CHROMIUM = Path("/usr/bin/chromium")
FONT_AWESOME_LOADED = """document.fonts.ready.then(() =>
    [...document.fonts].some(f => f.family.includes('Font Awesome') && f.status === 'loaded'))"""


def _report(tmp_path: Path) -> Path:
    """A run's Data Docs for two tables: one passing, one failing."""
    catalog = make_catalog(tmp_path)
    docs = DataDocs(tmp_path / "reports" / "shop__run-1", "run-1")
    for name, values in (("good", ["a", "b"]), ("bad", ["a", None])):
        writer = IcebergWriter(catalog, create(catalog, name))
        writer.table.append(pa.table({"id": [1, 2], "v": values}, schema=rows([], "").schema))
        expectation = Expectation("expect_column_values_to_not_be_null", {"column": "v"}, {})
        docs.validate(f"db.{name}", writer.table.scan().to_arrow().to_pandas(), [expectation])
    return docs.build()


def test_every_cdn_link_points_at_a_vendored_file(tmp_path: Path) -> None:
    index = _report(tmp_path)
    pages = list(index.parent.rglob("*.html"))
    assert len(pages) >= 3  # the index and a page per validation
    for page in pages:
        text = page.read_text()
        for url in report_assets.ASSETS:
            assert url not in text, f"{page.name} still loads {url}"
        assert "integrity=" not in text
        assert "crossorigin" not in text
    assets = index.parent.parent / report_assets.VENDOR
    for path in report_assets.ASSETS.values():
        assert (assets / path).is_file()
    assert any((assets / "@fortawesome/fontawesome-free/webfonts").glob("*.woff2"))


def test_without_the_packages_the_links_stay_and_a_warning_says_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(report_assets.ENVIRONMENT, str(tmp_path / "nowhere"))
    index = _report(tmp_path)
    assert "https://code.jquery.com/jquery-3.7.1.min.js" in index.read_text()
    assert "Fix: `make setup`" in caplog.text


STYLED_CELL = """() => {
  const cell = document.querySelector("table.table td");
  return cell !== null && getComputedStyle(cell).borderTopStyle === "solid";
}"""


def test_the_report_renders_offline_in_a_browser(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    index = _report(tmp_path)
    refused: list[str] = []

    def offline(route: Any) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        # As a user's browser opens the file the CLI names: no flag relaxing file:// (a script with
        # an integrity check would be blocked there: CORS).
        browser = p.chromium.launch(executable_path=str(CHROMIUM))
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.route("**/*", offline)
        failed: list[str] = []
        page.on("requestfailed", lambda request: failed.append(request.url))
        page.goto(index.as_uri(), wait_until="load")
        # bootstrap-table builds the index's rows from its data: without its script, none.
        rows = page.locator("#section-1-content-block-2-1-body-table tbody tr")
        rows.first.wait_for(timeout=15_000)
        page.screenshot(path=str(tmp_path / "index.png"), full_page=True)
        assert rows.count() == 2
        texts = rows.all_inner_texts()
        assert [any(name in t and "run-1" in t for t in texts) for name in ("db.bad", "db.good")] == [
            True,
            True,
        ]
        # Styled (Bootstrap's table class; unstyled: no borders) and the icon font (status marks).
        # Waited for: bootstrap-table replaces the rows it built once more after they first show,
        # and a cell read in between is detached (no computed style); unstyled, this times out.
        # Read once, where it is waited for: a second read could meet the next replacement (it did,
        # in one CI run: '' from a detached cell).
        styled = page.wait_for_function(STYLED_CELL, timeout=15_000)
        assert styled.json_value() is True
        assert page.evaluate(FONT_AWESOME_LOADED)
        assert page.evaluate("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        # A row opens its validation page (bootstrap-table's click handler), styled and scripted.
        rows.filter(has_text="db.bad").locator("td").nth(1).click()
        page.wait_for_url("**/validations/db/bad/**", timeout=15_000)
        page.wait_for_load_state("load")
        page.screenshot(path=str(tmp_path / "validation.png"), full_page=True)
        assert "values must never be null" in page.inner_text("body")
        assert page.evaluate("typeof vegaEmbed") == "function"
        assert page.evaluate(FONT_AWESOME_LOADED)
        browser.close()
    assert refused == []  # nothing came from the internet
    assert failed == []
