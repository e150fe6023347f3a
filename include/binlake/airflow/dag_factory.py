"""The DAGs of every pipeline file: ``binlake__<name>``, ``binlake__<name>__ddl``,
``binlake__<name>__backfill`` and ``binlake__<name>__verify``.

Wiring only: each task calls ``tasks`` or an operator of ``operators`` when it runs. Building the
DAGs reads the pipeline files and nothing else (no database, no Spark, no state store).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, PokeReturnValue, chain, task

from binlake.airflow import assets
from binlake.airflow import tasks as work
from binlake.airflow.operators import (
    BinlakeQualityOperator,
    BinlakeSparkSubmitOperator,
    BinlakeVerifyOperator,
)
from binlake.airflow.pipelines import PipelineFile, read_pipeline_files

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
#: The backfill id a task planned (its XCom), for the Spark task's arguments: decided in one place.
_PLANNED_ID = "{{{{ ti.xcom_pull(task_ids='{task}', key='backfill_id') }}}}"


def build_dags(folder: Path | None = None) -> dict[str, DAG]:
    """DAG id → DAG for every pipeline file in ``folder`` (default: ``BINLAKE_PIPELINES_DIR``)."""
    dags: dict[str, DAG] = {}
    for pipeline in read_pipeline_files(folder):
        for dag in (pipeline_dag(pipeline), ddl_dag(pipeline), backfill_dag(pipeline), verify_dag(pipeline)):
            dags[dag.dag_id] = dag
    return dags


def _defaults(pipeline: PipelineFile) -> dict[str, Any]:
    return {"owner": "binlake", "retries": pipeline.airflow.retries, "retry_delay": dt.timedelta(minutes=1)}


def _tags(pipeline: PipelineFile, *more: str) -> list[str]:
    return sorted({"binlake", "cdc", pipeline.name, *more, *pipeline.airflow.tags})


def pipeline_dag(pipeline: PipelineFile) -> DAG:
    """validate → plan → snapshot (mapped Spark jobs) → switch → quality → stream → quality."""
    path = str(pipeline.path)
    with DAG(
        dag_id=pipeline.dag_id,
        description=f"CDC of {', '.join(pipeline.tables) or 'the source'} into Iceberg",
        doc_md=_PIPELINE_DOC.format(
            name=pipeline.name, path=path, pool=pipeline.airflow.pool, catalog=pipeline.catalog
        ),
        schedule=pipeline.airflow.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=_defaults(pipeline),
        tags=_tags(pipeline, "snapshot", "stream"),
        params={
            "stream_mode": Param(
                "continuous",
                enum=["continuous", "until-caught-up"],
                description="continuous: the stream task runs until stopped; until-caught-up: it "
                "stops once the source's position at its start is applied (scheduled runs)",
            )
        },
    ) as dag:

        @task(task_id="validate", doc_md="Checks the config and the source (binlog settings, privileges).")
        def validate() -> list[dict[str, Any]]:
            return work.validate(path)

        @task(
            task_id="plan",
            doc_md="Splits the tables into chunks (kept); returns the unfinished ones in groups.",
        )
        def plan() -> list[list[str]]:
            return work.plan_chunk_groups(path, pipeline.airflow.snapshot_jobs)

        @task(
            task_id="switch",
            trigger_rule="none_failed",
            doc_md="The stream's start offset, once every chunk is read.",
        )
        def switch() -> dict[str, Any]:
            return work.switch(path)

        groups = plan()
        snapshot = BinlakeSparkSubmitOperator.partial(
            task_id="snapshot",
            job="snapshot",
            config_path=path,
            pipeline=pipeline.name,
            catalog=pipeline.catalog,
            conn_id=pipeline.airflow.spark_conn_id,
            pool=pipeline.airflow.pool,
            outlets=[assets.sink_alias(pipeline.name)],
            doc_md="Reads a group of chunks into Iceberg (one Spark job); pushes their high watermarks.",
        ).expand(chunks=groups)
        quality = BinlakeQualityOperator(
            task_id="quality", config_path=path, doc_md="great-expectations on every sink table; Data Docs."
        )
        stream = BinlakeSparkSubmitOperator(
            task_id="stream",
            job="stream",
            config_path=path,
            pipeline=pipeline.name,
            catalog=pipeline.catalog,
            stream_mode="{{ params.stream_mode }}",
            conn_id=pipeline.airflow.spark_conn_id,
            outlets=[assets.sink_alias(pipeline.name)],
            doc_md="The binlog stream (Spark Structured Streaming); schema changes wait for the __ddl DAG.",
        )
        caught_up = BinlakeQualityOperator(
            task_id="quality_after_stream",
            config_path=path,
            doc_md="Quality once the stream stops (until-caught-up runs: the sink at the source's position).",
        )
        chain(validate(), groups, snapshot, switch(), quality, stream, caught_up)
    return dag


def ddl_dag(pipeline: PipelineFile) -> DAG:
    """wait for a pending schema change → apply it → quality of the changed tables; continuously."""
    path = str(pipeline.path)
    with DAG(
        dag_id=f"{pipeline.dag_id}__ddl",
        description=f"Applies the schema changes the {pipeline.name} stream meets",
        doc_md=_DDL_DOC.format(name=pipeline.name, behavior=pipeline.behavior),
        schedule="@continuous",
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=_defaults(pipeline),
        tags=_tags(pipeline, "ddl"),
    ) as dag:

        @task.sensor(
            task_id="wait_for_schema_change",
            poke_interval=10,
            timeout=3600,
            mode="reschedule",
            soft_fail=True,
            doc_md="Waits (without holding a worker slot) for a schema change the stream recorded.",
        )
        def wait() -> PokeReturnValue:
            pending = work.pending_schema_changes(path)
            return PokeReturnValue(is_done=bool(pending), xcom_value=pending)

        @task(
            task_id="apply_schema_change",
            outlets=[assets.sink_alias(pipeline.name)],
            doc_md="Applies each pending change under the pipeline's behaviour; the stream resumes.",
        )
        def apply() -> list[str]:
            from airflow.sdk import get_current_context

            touched = work.apply_schema_changes(path)
            assets.emit(get_current_context(), pipeline.name, pipeline.catalog, touched)
            return touched

        applied = apply()
        quality = BinlakeQualityOperator(
            task_id="quality", config_path=path, tables=applied, doc_md="Quality of the changed tables."
        )
        chain(wait(), applied, quality)
    return dag


def backfill_dag(pipeline: PipelineFile) -> DAG:
    """plan → backfill (a Spark job stages chunks) → wait until the stream applied them → quality."""
    path = str(pipeline.path)
    with DAG(
        dag_id=f"{pipeline.dag_id}__backfill",
        description=f"Re-snapshots tables of {pipeline.name} while its stream runs",
        doc_md=_BACKFILL_DOC.format(name=pipeline.name),
        schedule=pipeline.airflow.backfill_schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=_defaults(pipeline),
        tags=_tags(pipeline, "backfill"),
        params={
            "tables": Param(
                [],
                type="array",
                items={"type": "string"},
                description="Source tables (`database.table`) to read again; empty: every table",
            ),
            "key_from": Param(
                None, type=["null", "integer"], description="First chunk-key value (integral keys only)"
            ),
            "key_to": Param(None, type=["null", "integer"], description="Chunk-key value to stop before"),
            "chunk_size": Param(
                None, type=["null", "integer"], minimum=1, description="Rows per chunk (default: the YAML's)"
            ),
        },
    ) as dag:

        @task(
            task_id="plan",
            multiple_outputs=True,
            doc_md="Checks the backfill can run, splits the tables, records the chunks.",
        )
        def plan() -> dict[str, Any]:
            from airflow.sdk import get_current_context

            context = get_current_context()
            # A healing run (``airflow/healing_runs.py``) names the stream's backfill in its conf.
            backfill_id = (context["dag_run"].conf or {}).get("backfill_id") or context["run_id"]
            return work.plan_backfill(path, backfill_id, dict(context["params"]))

        planned: Any = plan()  # its dict's keys are XComs of their own (multiple_outputs)
        backfill = BinlakeSparkSubmitOperator(
            task_id="backfill",
            job="backfill",
            config_path=path,
            pipeline=pipeline.name,
            catalog=pipeline.catalog,
            backfill_id=_PLANNED_ID.format(task="plan"),
            conn_id=pipeline.airflow.spark_conn_id,
            pool=pipeline.airflow.pool,
            doc_md="Reads the planned chunks with watermarks (one Spark job) and stages them.",
        )
        quality = BinlakeQualityOperator(
            task_id="quality",
            config_path=path,
            tables=planned["sink_tables"],
            doc_md="Quality of the backfilled tables.",
        )
        wait = _wait_applied(
            pipeline,
            "Waits (without holding a worker slot) until the running stream has applied every staged chunk.",
        )
        chain(planned, backfill, wait(planned["backfill_id"], planned["sink_tables"]), quality)
    return dag


def verify_dag(pipeline: PipelineFile) -> DAG:
    """verify → (drifted, and the form asks for it) stage the repair → backfill → wait → verify again."""
    path = str(pipeline.path)
    with DAG(
        dag_id=f"{pipeline.dag_id}__verify",
        description=f"Proves the sink tables of {pipeline.name} equal the source, chunk by chunk",
        doc_md=_VERIFY_DOC.format(name=pipeline.name),
        schedule=pipeline.airflow.verify_schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=_defaults(pipeline),
        tags=_tags(pipeline, "verify"),
        params={
            "tables": Param(
                [],
                type="array",
                items={"type": "string"},
                description="Source tables (`database.table`) to verify; empty: every table",
            ),
            "key_from": Param(
                None, type=["null", "integer"], description="First chunk-key value (integral keys)"
            ),
            "key_to": Param(None, type=["null", "integer"], description="Chunk-key value to stop before"),
            "repair": Param(
                False, type="boolean", description="Backfill drifted chunks, then verify them again"
            ),
        },
    ) as dag:
        first = BinlakeVerifyOperator(
            task_id="verify", config_path=path, doc_md="Chunk checksums of the source against the sink."
        )

        @task(
            task_id="stage_repair",
            multiple_outputs=True,
            doc_md="Drifted chunks become a backfill (skipped when none drifted).",
        )
        def stage_repair() -> dict[str, Any]:
            from airflow.sdk import get_current_context
            from airflow.sdk.exceptions import AirflowSkipException

            context = get_current_context()
            if not context["params"].get("repair"):
                raise AirflowSkipException("the form asks for no repair")
            run_id = str(context["run_id"])
            staged = work.stage_verify_repair(path, run_id, run_id)
            if staged is None:
                raise AirflowSkipException("nothing drifted")
            return staged

        staged: Any = stage_repair()
        backfill = BinlakeSparkSubmitOperator(
            task_id="backfill", job="backfill", config_path=path, pipeline=pipeline.name,
            catalog=pipeline.catalog, backfill_id=_PLANNED_ID.format(task="stage_repair"),
            conn_id=pipeline.airflow.spark_conn_id,
            pool=pipeline.airflow.pool, doc_md="Reads the drifted chunks again (a Spark job), stages them.",
        )  # fmt: skip
        again = BinlakeVerifyOperator(
            task_id="verify_again", config_path=path, again=True,
            doc_md="The repaired chunks verified again (fails if any still differs).",
        )  # fmt: skip
        wait = _wait_applied(pipeline, "Waits until the running stream has applied the repair.")
        chain(first, staged, backfill, wait(staged["backfill_id"], staged["sink_tables"]), again)
    return dag


def _wait_applied(pipeline: PipelineFile, doc: str) -> Any:
    """The sensor task waiting (reschedule mode: no worker slot) until the running stream has
    applied a backfill's units; then it updates the sink tables' Assets."""
    path = str(pipeline.path)

    @task.sensor(
        task_id="wait_applied",
        poke_interval=5,
        timeout=6 * 3600,
        mode="reschedule",
        outlets=[assets.sink_alias(pipeline.name)],
        doc_md=doc,
    )
    def wait_applied(backfill_id: str, sink_tables: list[str]) -> PokeReturnValue:
        from airflow.sdk import get_current_context

        counts = work.backfill_applied(path, backfill_id)
        if counts is not None:
            assets.emit(get_current_context(), pipeline.name, pipeline.catalog, sink_tables)
        return PokeReturnValue(is_done=counts is not None, xcom_value=counts)

    return wait_applied


_PIPELINE_DOC = """\
### binlake pipeline `{name}`

Change data capture from MySQL/MariaDB into Apache Iceberg, configured by `{path}`.

1. **validate** the source (binlog settings, privileges) — each error names its fix.
2. **plan**: split the tables into chunks (kept in the state store); returns the unfinished chunks
   in groups. A rerun of this DAG resumes: finished chunks are not read again.
3. **snapshot**: one Spark job per group (mapped, pool `{pool}`), without locks; each pushes its
   chunks' high watermarks to XCom.
4. **switch**: the stream's start offset (the smallest high watermark).
5. **quality**: great-expectations on every sink table — row count against the source at the
   sink's binlog offset, primary key not null and unique, the YAML's expectations. The task's
   *Data Docs* link opens the report.
6. **stream**: the binlog into Iceberg, exactly once. Param `stream_mode`: `continuous` (runs until
   stopped) or `until-caught-up`. Schema changes wait for `binlake__{name}__ddl`.
7. **quality_after_stream**: the same checks once the stream has stopped (each scheduled
   `until-caught-up` run ends with the sink checked at the source's position).

Sink tables are Assets `iceberg://{catalog}/<namespace>/<table>`.
"""

_DDL_DOC = """\
### Schema changes of `{name}`

The stream stops at a schema change of a captured table (after committing every change before
it) and records it. This DAG's sensor sees it, **apply_schema_change** makes it in Iceberg under
the pipeline's behaviour (`{behavior}`), the stream resumes, and **quality** checks the changed
tables. `binlake status` lists pending changes too.
"""

_BACKFILL_DOC = """\
### Backfill of `{name}`

Reads chosen tables (or a key range of them) again while the stream runs — to repair a sink table,
or after a fix in the source — without stopping anything:

1. **plan**: checks the backfill can run (a finished snapshot, the stream past it) and splits the
   tables into chunks. Form: `tables` (empty: all), `key_from`/`key_to` (integral chunk keys),
   `chunk_size`.
2. **backfill**: one Spark job reads the chunks without locks, each between a low and a high
   watermark, and stages them (nothing is written to the sink tables).
3. **wait_applied**: the stream applies each staged chunk when it reaches the chunk's high
   watermark (it stays the only writer): the rows of the chunk's key range are replaced, and
   changes since are applied on top. This waits until all are applied — the stream must run.
4. **quality** of the backfilled tables.

A rerun of the same DAG run resumes: chunks staged or applied are not read again.

Runs named `heal-…` are the stream's own (`stream.on_gap: backfill`): a change it could not
replicate held a table back, and it reads the backfill that repairs it by itself; the run shows it
here, waits until the stream has applied it, and checks the table's quality.
"""

_VERIFY_DOC = """\
### Verify `{name}`

Proves each sink table equals its source table, chunk by chunk — while the stream runs:

1. **verify**: for each chunk of the chosen tables (form: `tables`, `key_from`/`key_to`), the
   source server computes a checksum (row count and the sum of a per-row MD5 over a canonical
   rendering of every column) at a known binlog position, without locks; the sink's rows are read
   once, at one snapshot, and rolled forward along the binlog to the same position. Each chunk is
   *equal*, *drifted* (its key range and both row counts are listed) or *unverified* (why). The
   task's *Data Docs* link opens the verdicts; `binlake status` shows them too.
2. With the form's `repair` on and chunks drifted: **stage_repair** makes them a backfill,
   **backfill** reads them again, **wait_applied** waits for the running stream to apply them (the
   tables' Assets are updated), and **verify_again** checks those chunks once more.

Without `repair`, a drifted chunk fails the run.
"""
