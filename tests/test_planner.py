"""`binlake plan`: validate → discover → split → store; reruns keep the plan; bad input leaves nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.state.store import StateStore
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import pipeline_dict, run_binlake


@pytest.fixture
def shop(mariadb: PrivateMariaDB, database: str) -> str:
    demo.load(mariadb.admin_connection, 3000, database=database)
    return database


def shop_config(mariadb: PrivateMariaDB, shop: str, tmp_path: Path, **source: Any) -> dict[str, Any]:
    return pipeline_dict(
        mariadb,
        [rf"{shop}\..*"],
        tmp_path / "work",
        chunk_size=200,
        chunk_key_columns={f"{shop}.page_views": "customer_id"},
        **source,
    )


def test_plan_prints_strategy_and_stores_the_plan(
    mariadb: PrivateMariaDB, shop: str, write_config: Callable[..., Path], tmp_path: Path
) -> None:
    raw = shop_config(mariadb, shop, tmp_path)
    raw["sink"] = {
        "layout": [
            {
                "source_table": rf"{shop}\.orders",
                "partition_by": ["month(ordered_at)", "bucket(8, customer_id)"],
            }
        ]
    }
    path = write_config(raw)
    result = run_binlake("--config", str(path), "plan")
    assert result.returncode == 0, result.output
    assert f"{shop}.orders" in result.stdout
    # each table's sink layout: a rule's, or sorted by its key
    assert (
        f"{shop}.orders — sink layout: month(ordered_at), bucket(8, customer_id); sorted by id ASC"
        in result.stdout
    )
    assert f"{shop}.coupons — sink layout: not partitioned; sorted by code ASC" in result.stdout
    assert "even" in result.stdout
    assert "uneven" in result.stdout  # gift_cards' sparse keys and coupons' VARCHAR keys
    assert "why: integral key, distribution factor" in result.stdout
    assert "7 tables" in result.stdout

    as_json = json.loads(run_binlake("--config", str(path), "plan", "--json").stdout)
    tables = {t["table"]: t for t in as_json["tables"]}
    assert tables[f"{shop}.orders"]["strategy"] == "even"
    assert tables[f"{shop}.orders"]["partition_by"] == ["month(ordered_at)", "bucket(8, customer_id)"]
    assert tables[f"{shop}.orders"]["chunks"] == 5  # 900 dense ids, 200 per chunk
    assert tables[f"{shop}.gift_cards"]["strategy"] == "uneven"
    assert tables[f"{shop}.page_views"]["key_column"] == "customer_id"

    config = PipelineConfig.model_validate(shop_config(mariadb, shop, tmp_path))
    store = StateStore(config.pipeline.resolved_state_uri)
    stored = {p.table.table: p for p in store.plans("test").load()}
    assert set(stored) == set(demo.COLUMNS)
    assert sum(len(p.chunks) for p in stored.values()) == sum(t["chunks"] for t in as_json["tables"])


def test_rerun_keeps_the_plan_and_progress_unless_replanned(
    mariadb: PrivateMariaDB, shop: str, write_config: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_config(shop_config(mariadb, shop, tmp_path))
    assert run_binlake("--config", str(path), "plan").returncode == 0
    config = PipelineConfig.model_validate(shop_config(mariadb, shop, tmp_path))
    store = StateStore(config.pipeline.resolved_state_uri)
    orders = TableId(shop, "orders")
    first = store.plans("test").load([orders])[0].chunks[0].chunk
    store.plans("test").finish_chunk(
        first, BinlogOffset("binlog.000001", 4), BinlogOffset("binlog.000001", 9), 199
    )
    columns = ", ".join(demo.COLUMNS["orders"][1:])
    mariadb.execute(f"INSERT INTO orders SELECT id + 100000, {columns} FROM orders", database=shop)

    rerun = json.loads(run_binlake("--config", str(path), "plan", "--json").stdout)
    again = {t["table"]: t for t in rerun["tables"]}[orders.name]
    assert again["finished_chunks"] == 1  # resumed: the earlier plan and its progress are kept
    assert again["chunks"] == 5

    replanned = json.loads(run_binlake("--config", str(path), "plan", "--json", "--replan").stdout)
    fresh = {t["table"]: t for t in replanned["tables"]}[orders.name]
    assert fresh["finished_chunks"] == 0
    assert fresh["chunks"] > 5


def test_missing_chunk_key_column_stores_nothing(
    mariadb: PrivateMariaDB, shop: str, write_config: Callable[..., Path], tmp_path: Path
) -> None:
    config = shop_config(mariadb, shop, tmp_path)
    config["source"]["chunk_key_columns"] = {f"{shop}.page_views": "no_such_column"}
    result = run_binlake("--config", str(write_config(config)), "plan")
    assert result.returncode == 1
    assert "column `no_such_column` does not exist" in result.stderr
    assert "nothing was planned" in result.stderr
    assert "Traceback" not in result.output
    state = PipelineConfig.model_validate(config).pipeline.resolved_state_uri
    assert StateStore(state).plans("test").load() == []


def test_failed_validation_stops_planning(
    mariadb: PrivateMariaDB, shop: str, write_config: Callable[..., Path], tmp_path: Path
) -> None:
    config = shop_config(mariadb, shop, tmp_path, password="wrong-password")
    result = run_binlake("--config", str(write_config(config)), "plan")
    assert result.returncode == 1
    assert "access denied" in result.stderr
    assert "wrong-password" not in result.output
