"""The verify DAG with a running stream and a live workload: a table damaged straight in Iceberg
is found drifted, repaired by the DAG's backfill, verified again; its Asset gets an event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from binlake.events import TableId
from binlake.sink.catalog import open_catalog, sink_identifier, sink_name
from binlake.state.offset_names import STREAM
from binlake.state.store import StateStore
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from tests.dags.conftest import snapshotted_demo, start_stream_of, stop_stream, wait_for

pytestmark = pytest.mark.slow


def test_verify_dag_finds_the_damage_and_repairs_it(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, local_airflow: Any, write_config: Any
) -> None:
    airflow, config = snapshotted_demo(mariadb, database, tmp_path / "work", spark, local_airflow)
    orders = TableId(database, "orders")
    open_catalog(config).load_table(sink_name(config, orders)).delete("id >= 100 and id < 400")

    stream = start_stream_of(config, mariadb, write_config)
    store = StateStore(config.pipeline.resolved_state_uri)
    workload = Workload(mariadb.admin_connection, database=database, rate=100, txn_size=2)
    try:
        wait_for("the stream's first batch", lambda: store.offsets("demo").load(STREAM))
        workload.start()
        conf = {"tables": [orders.name], "repair": True}
        run = airflow.run("dags", "test", "binlake__demo__verify", "-c", json.dumps(conf), timeout=900)
        workload.stop()
        assert run.returncode == 0, run.output[-5000:]
        assert mariadb.password not in run.output
    finally:
        workload.stop()
        output = stop_stream(stream)
    assert stream.returncode == 0, output[-3000:]

    states = airflow.task_states("binlake__demo__verify")
    assert set(states.values()) == {"success"}, states
    assert len(states) == 5
    [first] = airflow.xcoms("binlake__demo__verify", "verify")
    table = first["tables"][orders.name]
    assert table["drifted"], table  # the damage was found …
    assert not first["clean"]
    [again] = airflow.xcoms("binlake__demo__verify", "verify_again")
    assert again["clean"] is True  # … and repaired
    assert again["tables"][orders.name]["repaired"] == len(table["drifted"])
    assert Path(again["report_url"].split("/reports/demo/")[1].split("/")[0]).name
    [link] = airflow.xcoms("binlake__demo__verify", "verify_again", "_link_DataDocsLink")
    assert link == again["report_url"]
    events = airflow.query("SELECT a.uri FROM asset_event e JOIN asset a ON a.id = e.asset_id")
    assert events == [(f"iceberg://binlake_demo/{'/'.join(sink_identifier(config, orders))}",)]
    store.close()
