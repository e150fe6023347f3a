"""A gap healed under Airflow shows in the grid: `airflow dags test binlake__demo` (snapshot, then
the stream until caught up) meets a statement-logged update right after the snapshot; the stream
heals the table by itself, and its task triggers a run `heal-…` of the backfill DAG, whose run
reads nothing, waits for the stream's backfill and checks the table."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.state.offset_names import SWITCH
from binlake.state.store import StateStore
from binlake.testing import demo
from binlake.testing.compare import compare
from binlake.testing.private_server import PrivateMariaDB
from tests.dags.conftest import airflow_pipeline, config_of
from tests.helpers import in_session

pytestmark = pytest.mark.slow


def _gap_after_the_snapshot(
    mariadb: PrivateMariaDB, database: str, state_uri: str, done: threading.Event
) -> None:
    """A statement-logged update once the snapshot has switched (before the stream task starts)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            with StateStore(state_uri) as store:
                if store.offsets("demo").load(SWITCH) is not None:
                    break
        except Exception:  # the state store is not made yet
            pass
        time.sleep(0.2)
    in_session(mariadb, database, "SET SESSION binlog_format = 'STATEMENT'",
               "UPDATE customers SET loyalty_points = loyalty_points + 5 WHERE id % 7 = 0")  # fmt: skip
    done.set()


def test_a_healed_gap_is_a_run_of_the_backfill_dag(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, local_airflow: Any
) -> None:
    demo.load(mariadb.admin_connection, 500, database=database)
    pipeline = airflow_pipeline(database, tmp_path / "work")
    airflow = local_airflow(pipeline)
    config = config_of(pipeline, mariadb)
    done = threading.Event()
    gap = threading.Thread(
        target=_gap_after_the_snapshot, args=(mariadb, database, config.pipeline.resolved_state_uri, done)
    )
    gap.start()
    run = airflow.run(
        "dags", "test", "binlake__demo", "-c", '{"stream_mode": "until-caught-up"}', timeout=900
    )
    gap.join()
    assert run.returncode == 0, run.output[-5000:]
    assert done.is_set()

    # The stream's task triggered the healing run (the grid shows it); the scheduler would run it.
    [(run_id, conf)] = airflow.query(
        "SELECT run_id, conf FROM dag_run WHERE dag_id = 'binlake__demo__backfill'"
    )
    conf = json.loads(conf) if isinstance(conf, str) else conf
    assert run_id.startswith(f"heal-{database}.customers-")
    assert conf == {"healing": True, "backfill_id": run_id, "tables": [f"{database}.customers"]}

    # That run: plans the stream's backfill, reads nothing, waits until it is applied, checks quality.
    healing = airflow.run("dags", "test", "binlake__demo__backfill", "-c", json.dumps(conf), timeout=600)
    assert healing.returncode == 0, healing.output[-5000:]
    assert "the stream reads it" in healing.output
    states = {t: s for (t, _), s in airflow.task_states("binlake__demo__backfill").items()}
    assert states == {
        "plan": "success",
        "backfill": "success",
        "wait_applied": "success",
        "quality": "success",
    }
    assert [r for r in compare(config) if not r.equal] == []
