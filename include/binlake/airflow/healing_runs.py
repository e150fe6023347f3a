"""Healing backfills as runs of the backfill DAG, so Airflow's grid shows them.

With ``stream.on_gap: backfill`` the stream reads the backfill that repairs a gap by itself
(``spark/healer.py``). While the stream task runs, this watcher looks at the state store's open
healing repairs and triggers, for each, a run of ``binlake__<pipeline>__backfill`` named after the
backfill (``heal-…``) with ``{"healing": true}`` in its conf: that run reads nothing (the stream
does), waits until the stream has applied the backfill, and checks the table's quality — the
grid shows when a table was held back, healed and checked. A run that exists already (a restarted
stream task) is kept.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

from binlake.config import PipelineConfig
from binlake.state.repair_ledger import RepairLedger
from binlake.state.store import StateStore
from binlake.stream.repairs import HEAL_PREFIX

log = logging.getLogger(__name__)

#: Seconds between looks at the state store's repairs.
LOOK_S = 10.0


def healing_conf(conf: dict[str, Any] | None) -> bool:
    """Whether a backfill DAG run is a healing one (the stream reads its backfill)."""
    return bool((conf or {}).get("healing"))


class HealingRuns:
    """Triggers a backfill DAG run per healing backfill while the stream task runs (a context
    manager: a thread looking every ``LOOK_S``, and once more at the end)."""

    def __init__(self, config: PipelineConfig, dag_id: str) -> None:
        self.config = config
        self.dag_id = dag_id
        self.triggered: set[str] = set()
        self.since = dt.datetime.now(dt.UTC)
        """Gaps open now or opened from here on get a run (not those an earlier task healed)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="binlake healing runs", daemon=True)

    def __enter__(self) -> HealingRuns:
        self._store = StateStore(self.config.pipeline.resolved_state_uri)  # one for every look
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._look()  # a gap opened and healed within the last look
        self._store.close()

    def _run(self) -> None:
        while not self._stop.wait(LOOK_S):
            self._look()

    def _look(self) -> None:
        try:
            for backfill_id, table in self._heals():
                if backfill_id not in self.triggered:
                    conf = {"healing": True, "backfill_id": backfill_id, "tables": [table]}
                    trigger(self.dag_id, backfill_id, conf)
                    self.triggered.add(backfill_id)
        except Exception as e:  # the grid misses a run; the stream heals the table all the same
            log.warning("could not show a healing backfill in Airflow: %s: %s", type(e).__name__, e)

    def _heals(self) -> list[tuple[str, str]]:
        repairs = RepairLedger(self._store, self.config.pipeline.name).repairs()
        return [
            (r.backfill_id, r.table.name)
            for r in repairs
            if r.backfill_id.startswith(HEAL_PREFIX) and (r.status == "open" or r.opened_at >= self.since)
        ]


def trigger(dag_id: str, run_id: str, conf: dict[str, Any]) -> None:
    """Create the DAG run ``run_id`` of ``dag_id`` through the task's supervisor (as Airflow's
    ``TriggerDagRunOperator`` does); one that exists already is left as it is."""
    from airflow.sdk.exceptions import ErrorType
    from airflow.sdk.execution_time.comms import ErrorResponse, TriggerDagRun
    from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

    answer = SUPERVISOR_COMMS.send(TriggerDagRun(dag_id=dag_id, run_id=run_id, conf=conf))
    if isinstance(answer, ErrorResponse) and answer.error != ErrorType.DAGRUN_ALREADY_EXISTS:
        raise RuntimeError(f"Airflow refused the run `{run_id}` of {dag_id}: {answer.detail}")
    if not isinstance(answer, ErrorResponse):
        log.info("healing backfill %s: run `%s` of %s triggered", conf.get("tables"), run_id, dag_id)
