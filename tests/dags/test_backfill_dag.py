"""The backfill DAG with a running stream and a live workload: rows deleted straight from an
Iceberg table come back, and the sink equals the source."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from binlake.events import TableId
from binlake.sink.catalog import open_catalog, sink_identifier, sink_name
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import server_version
from binlake.state.offset_names import STREAM
from binlake.state.store import StateStore
from binlake.testing.compare import compare, sink_rows
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from tests.dags.conftest import snapshotted_demo, start_stream_of, stop_stream, wait_for

pytestmark = pytest.mark.slow


def test_backfill_dag_repairs_a_table_while_the_stream_and_the_workload_run(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, local_airflow: Any, write_config: Any
) -> None:
    airflow, config = snapshotted_demo(mariadb, database, tmp_path / "work", spark, local_airflow)
    orders = TableId(database, "orders")
    table = open_catalog(config).load_table(sink_name(config, orders))
    table.delete("id >= 100 and id < 400")  # lost from the sink, still in the source
    assert len(sink_rows(config, orders)) < 1700

    stream = start_stream_of(config, mariadb, write_config)
    store = StateStore(config.pipeline.resolved_state_uri)
    workload = Workload(mariadb.admin_connection, database=database, rate=100, txn_size=2)
    try:
        wait_for("the stream's first batch", lambda: store.offsets("demo").load(STREAM))
        workload.start()
        run = airflow.run(
            "dags",
            "test",
            "binlake__demo__backfill",
            "-c",
            json.dumps({"tables": [orders.name]}),
            timeout=600,
        )
        stats = workload.stop()
        assert run.returncode == 0, run.output[-5000:]
        assert mariadb.password not in run.output
        assert stats.total > 100
        with contextlib.closing(mariadb.admin_connection()) as conn:
            head = current_offset(conn, server_version(conn))
        wait_for("the stream to catch up", lambda: (store.offsets("demo").load(STREAM) or head) >= head)
    finally:
        workload.stop()
        output = stop_stream(stream)
    assert stream.returncode == 0, output[-3000:]

    states = airflow.task_states("binlake__demo__backfill")
    assert states == {("plan", -1): "success", ("backfill", -1): "success",
                      ("wait_applied", -1): "success", ("quality", -1): "success"}  # fmt: skip
    [planned] = airflow.xcoms("binlake__demo__backfill", "plan", "sink_tables")
    assert planned == [sink_name(config, orders)]
    [applied] = airflow.xcoms("binlake__demo__backfill", "wait_applied")
    assert set(applied) == {"applied"}
    # The backfilled table's Asset got an event when the stream had applied it.
    events = airflow.query("SELECT a.uri FROM asset_event e JOIN asset a ON a.id = e.asset_id")
    assert events == [(f"iceberg://binlake_demo/{'/'.join(sink_identifier(config, orders))}",)]
    [quality] = airflow.xcoms("binlake__demo__backfill", "quality")
    assert quality["success"] is True
    assert list(quality["tables"]) == planned
    # The stream's output names the rows it applied: in a batch's line, or between batches.
    assert re.search(r"backfilled [\d,]+|backfill applied at", output), output[-3000:]
    assert [r for r in compare(config) if not r.equal] == []
    store.close()
