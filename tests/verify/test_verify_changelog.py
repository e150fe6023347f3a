"""verify of a changelog table (issue 43): the state its changes replay to is compared with the
source chunk by chunk — signed (both images of an update; a table without a key) and by key (the
after image alone) — and a change missing from a changelog is found in exactly its chunk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import plan
from binlake.sink.catalog import open_catalog, sink_name
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing.private_server import PrivateMariaDB
from binlake.verify import changelog_sums
from binlake.verify.verification import VerifyReport, verify
from tests.helpers import assert_sink_equals_source, config_dict, stream_config


def _config(mariadb: PrivateMariaDB, database: str, tmp_path: Path) -> PipelineConfig:
    config = stream_config(
        mariadb, database, tmp_path, chunk_size=50, chunk_key_columns={f"{database}.visits": "n"}
    )
    raw = config_dict(config)
    raw["sink"]["modes"] = [
        {
            "source_table": rf"{database}\.orders",
            "mode": ["upsert", "changelog"],
            "changelog_updates": "after",
        },
        {"source_table": rf"{database}\.visits", "mode": ["upsert", "changelog"]},
    ]
    return PipelineConfig.model_validate(raw)


def _by_sink(report: VerifyReport) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for table in report.tables:
        found.setdefault(table.sink, {})
        for v in table.verdicts:
            found[table.sink][v.status] = found[table.sink].get(v.status, 0) + 1
    return found


def _drifted(report: VerifyReport, sink: str) -> list[tuple[Any, Any]]:
    (table,) = [t for t in report.tables if t.sink == sink]
    return [(v.range.start, v.range.end) for v in table.verdicts if v.status == "drifted"]


def _holding(report: VerifyReport, sink: str, key: int) -> list[tuple[Any, Any]]:
    """The chunk of ``sink``'s verdicts whose range holds ``key``."""
    (table,) = [t for t in report.tables if t.sink == sink]
    ranges = [(v.range.start, v.range.end) for v in table.verdicts]
    return [(a, b) for a, b in ranges if (a is None or a <= key) and (b is None or key < b)]


def test_verify_replays_a_changelog_and_finds_a_missing_change(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(changelog_sums, "_FOLD_ROWS", 20)  # changes folded to keys as they are read
    mariadb.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, note VARCHAR(20), total INT)",
        "INSERT INTO orders SELECT seq, CONCAT('n', seq), seq FROM seq_1_to_200",
        "CREATE TABLE visits (region VARCHAR(10), n INT)",  # no key: duplicates count
        "INSERT INTO visits SELECT ELT(1 + seq % 3, 'eu', 'us', NULL), seq % 40 FROM seq_1_to_120",
        database=database,
    )
    config = _config(mariadb, database, tmp_path)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "UPDATE orders SET total = total + 1 WHERE id <= 20",  # +U alone: replaces its key's row
        "UPDATE orders SET id = 1000 WHERE id = 30",  # a key update: -D of 30, +I of 1000
        "DELETE FROM orders WHERE id IN (120, 121)",
        "INSERT INTO orders VALUES (500, 'late', 5)",
        "UPDATE orders SET note = 'again' WHERE id = 1000",
        "UPDATE visits SET region = 'eu' WHERE n = 3",  # -U/+U of equal rows in a keyless table
        "DELETE FROM visits WHERE n = 7 LIMIT 1",
        "INSERT INTO visits VALUES ('us', 35), ('us', 35)",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    orders = sink_name(config, TableId(database, "orders"))
    visits = sink_name(config, TableId(database, "visits"))
    report = verify(config, "v1")
    found = _by_sink(report)
    assert set(found) == {orders, visits, orders + "_changelog", visits + "_changelog"}
    assert all(set(statuses) == {"equal"} for statuses in found.values()), found
    assert found[orders + "_changelog"] == found[orders]  # every chunk compared

    # A delete missing from each changelog: its key lives again (by key), its row stays (signed).
    catalog = open_catalog(config)
    catalog.load_table(orders + "_changelog").delete("__op__ == '-D' and id == 121")
    catalog.load_table(visits + "_changelog").delete("__op__ == '-D' and n == 7")
    report = verify(config, "v2")
    assert _drifted(report, orders + "_changelog") == _holding(report, orders, 121)
    assert _drifted(report, visits + "_changelog") == _holding(report, visits, 7)
    assert _drifted(report, orders) == []
    assert _drifted(report, visits) == []
