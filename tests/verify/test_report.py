"""A verification's Data Docs, opened in Debian's Chromium: the failing table's page names each
drifted and unverified chunk with its key range and row counts (screenshots kept in the test's
folder); the clean table passes."""

from __future__ import annotations

from pathlib import Path

from binlake.config import PipelineConfig
from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import ChunkRange
from binlake.state.verifications import ChunkVerdict
from binlake.verify.report import data_docs
from binlake.verify.verification import TableVerification, VerifyReport

CHROMIUM = Path("/usr/bin/chromium")


def _report() -> VerifyReport:
    at = BinlogOffset("binlog.000002", 4711)
    orders = TableVerification("shop.orders", "shop.orders", "id")
    orders.verdicts = [
        ChunkVerdict("shop.orders", "id", 0, ChunkRange(None, 1000), "equal", 999, 999, at),
        ChunkVerdict("shop.orders", "id", 1, ChunkRange(1000, 2000), "drifted", 1000, 990, at),
        ChunkVerdict(
            "shop.orders", "id", 2, ChunkRange(2000, None), "unverified", note="writes hit it 5 times"
        ),
    ]
    items = TableVerification("shop.items", "shop.items", "id")
    items.verdicts = [ChunkVerdict("shop.items", "id", 0, ChunkRange.all(), "repaired", 5, 5, at)]
    return VerifyReport("verify-1", "demo", [orders, items])


def test_the_report_lists_the_drifted_chunks(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    config = PipelineConfig.model_validate(
        {
            "pipeline": {"name": "demo", "work_dir": str(tmp_path)},
            "source": {"hostname": "h", "username": "u", "tables": [r"shop\..*"]},
        }
    )
    index = data_docs(config, _report())
    assert index == tmp_path / "reports" / "demo__verify-1" / "index.html"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--allow-file-access-from-files"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(index.as_uri(), wait_until="load")
        rows = page.locator("#section-1-content-block-2-1-body-table tbody tr")
        rows.first.wait_for(timeout=15_000)
        page.screenshot(path=str(tmp_path / "index.png"), full_page=True)
        texts = rows.all_inner_texts()
        assert len(texts) == 2
        assert [any(f"verify shop.{t}" in r for r in texts) for t in ("orders", "items")] == [True, True]
        rows.filter(has_text="shop.orders").locator("td").nth(1).click()
        page.wait_for_load_state("load")
        page.wait_for_timeout(500)
        page.screenshot(path=str(tmp_path / "orders.png"), full_page=True)
        body = page.inner_text("body")
        assert "Failed" in body
        assert "drifted: id in [1000, 2000): source 1000 rows, sink 990 rows at binlog.000002:4711" in body
        assert "unverified: id in [2000, +inf): writes hit it 5 times" in body
        browser.close()
