"""Quality runs on real sink tables: the row count reconciled with the binlog, Data Docs, results."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from binlake.config import PipelineConfig
from binlake.planner import plan
from binlake.quality.checkpoint import QualityError, run_quality
from binlake.sink.catalog import open_catalog
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.state.store import StateStore
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import config_dict, page_text, run_binlake, stream_config


def _with_quality(config: PipelineConfig, quality: dict[str, Any]) -> PipelineConfig:
    raw = config_dict(config)
    raw["quality"] = quality
    return PipelineConfig.model_validate(raw)


def _snapshotted(mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any) -> PipelineConfig:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)",
        "INSERT INTO t SELECT seq, seq FROM seq_1_to_400",
        "CREATE TABLE page_views (customer_id INT, b VARCHAR(10))",
        "INSERT INTO page_views VALUES (1, 'x'), (1, 'x'), (2, 'y'), (NULL, 'n')",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=100)
    plan(config)
    assert run_snapshot(config, spark).complete
    return config


def _checks(report: Any, table: str) -> dict[str, dict[str, Any]]:
    result = next(r for r in report.results if r.table == table)
    return {c["expectation"]: c for c in result.results}


@pytest.mark.slow
def test_row_count_reconciles_changes_made_after_the_snapshot(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _snapshotted(mariadb, database, tmp_path, spark)
    # The source moves on; the sink still holds the snapshot: the count must account for both.
    mariadb.execute(
        "INSERT INTO t SELECT seq, seq FROM seq_401_to_450",
        "DELETE FROM t WHERE id <= 20",
        "UPDATE t SET id = id + 1000 WHERE id BETWEEN 100 AND 110",  # key updates across chunks
        "INSERT INTO page_views VALUES (3, 'z')",
        database=database,
    )
    report = run_quality(config, run_name="after-snapshot")
    assert report.success, report.failures()
    count = _checks(report, f"{database}.t")["expect_table_row_count_to_be_between"]
    assert count["kwargs"] == {"min_value": 400, "max_value": 400}
    assert count["observed"] == 400
    assert "the source had 430 rows" in count["note"]
    assert "net +30" in count["note"]
    views = _checks(report, f"{database}.page_views")
    assert views["expect_table_row_count_to_be_between"]["observed"] == 4
    assert "expect_column_values_to_be_unique" not in views  # no primary key: no key checks
    # Data Docs for the run, and the results kept.
    assert report.index is not None
    assert report.index.exists()
    page = Path(next(r.report for r in report.results if r.table == f"{database}.t") or "")
    assert "Must have greater than or equal to 400 and less than or equal to 400 rows" in page_text(page)
    store = StateStore(config.pipeline.resolved_state_uri)
    assert {r.table for r in store.quality("test").results("after-snapshot")} == {
        f"{database}.t",
        f"{database}.page_views",
    }
    # After the stream has caught up, the count is exactly the source's.
    run_stream(config, spark, until_caught_up=True)
    after = run_quality(config, run_name="after-stream")
    assert after.success, after.failures()
    assert _checks(after, f"{database}.t")["expect_table_row_count_to_be_between"]["observed"] == 430


@pytest.mark.slow
def test_a_row_lost_from_the_sink_fails_the_run_and_the_report_names_it(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, write_config: Any
) -> None:
    config = _snapshotted(mariadb, database, tmp_path, spark)
    open_catalog(config).load_table(f"{database}.t").delete("id = 7")
    quality = {
        "on_failure": "fail",
        "tables": {
            f"{database}.t": [
                {"expectation_type": "expect_column_values_to_be_between",
                 "kwargs": {"column": "v", "min_value": 1, "max_value": 300}},
            ]
        },
    }  # fmt: skip
    failing = _with_quality(config, quality)
    report = run_quality(failing, run_name="lost-row")
    assert not report.success
    failures = report.failures()
    assert any("expect_table_row_count_to_be_between" in f and "found 399" in f for f in failures)
    assert any("expect_column_values_to_be_between" in f and "100 unexpected" in f for f in failures)
    page = next(r.report for r in report.results if r.table == f"{database}.t")
    text = page_text(Path(page or ""))
    assert "Status: Failed" in text
    assert "Unsuccessful Expectations 2" in text
    assert "less than or equal to 300" in text

    # The CLI: exit 1 under `fail`, 0 under `warn`, the failures named either way.
    raw = config_dict(failing)
    path = write_config(raw)
    result = run_binlake("--config", str(path), "quality", "--table", f"{database}.t")
    assert result.returncode == 1, result.output
    assert "FAILED" in result.stdout
    assert "expect_table_row_count_to_be_between" in result.stdout
    assert json.loads(result.stdout.splitlines()[-1])["success"] is False
    assert config.source.password.get_secret_value() not in result.output
    status = run_binlake("--config", str(path), "status")
    assert re.search(rf"quality: run \S+ at \S+: FAILED: {database}\.t \(.*/index\.html\)", status.stdout)
    raw["quality"]["on_failure"] = "warn"
    path.write_text(yaml.safe_dump(raw))
    assert run_binlake("--config", str(path), "quality", "--table", f"{database}.t").returncode == 0


def test_bad_expectations_and_tables_are_refused_clearly(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)", database=database)
    config = stream_config(mariadb, database, tmp_path)
    plan(config)  # creates the (empty) sink tables: no snapshot needed to refuse a bad suite
    with pytest.raises(QualityError, match=r"`nope\.t`.*not a table of pipeline `test`"):
        run_quality(config, ["nope.t"])
    unknown = _with_quality(config, {"tables": {f"{database}.t": [{"expectation_type": "expect_magic"}]}})
    with pytest.raises(QualityError, match="`expect_magic` is not a great-expectations expectation"):
        run_quality(unknown, [f"{database}.t"])
    wrong = _with_quality(
        config,
        {"tables": {f"{database}.t": [{"expectation_type": "expect_column_values_to_be_unique",
                                       "kwargs": {"colum": "v"}}]}},
    )  # fmt: skip
    with pytest.raises(QualityError, match=r"expect_column_values_to_be_unique.*is not valid.*colum"):
        run_quality(wrong, [f"{database}.t"])


def test_a_report_is_built_aside_and_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a report is rebuilt, its folder still holds the previous one whole (the reports app
    may be serving it); the new one takes its place at once, and nothing is left beside it."""
    import pandas as pd

    from binlake.quality import data_docs, report_assets
    from binlake.quality.expectations import Expectation

    folder = tmp_path / "reports" / "demo__q"
    check = [Expectation("expect_column_values_to_not_be_null", {"column": "id"}, {})]

    def build(run: str) -> Path:
        docs = data_docs.DataDocs(folder, run)
        docs.validate("shop.t", pd.DataFrame({"id": [1, 2]}), check)
        return docs.build()

    first = build("run-one")
    assert "run-one" in (folder / "index.html").read_text()
    seen: list[str] = []
    vendor = report_assets.vendor

    def while_building(built: Path) -> None:
        seen.append((folder / "index.html").read_text())  # what a reader sees mid-build
        vendor(built)

    monkeypatch.setattr(report_assets, "vendor", while_building)
    assert build("run-two") == first
    assert "run-one" in seen[0]
    assert "run-two" not in seen[0]
    assert "run-two" in (folder / "index.html").read_text()
    assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".")] == []  # no build left
