"""binlake's Airflow operators: Spark jobs through spark-submit, quality with its Data Docs link."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator, BaseOperatorLink

from binlake.airflow import assets
from binlake.airflow.runtime import load_pipeline, source_from_connection
from binlake.airflow.source_secret import handoff
from binlake.config import PipelineConfig
from binlake.spark.runtime.jvm_archive import with_archive
from binlake.spark.runtime.session import daemon_conf

#: The Spark entry points (``jobs/`` at the project's root), unless ``BINLAKE_JOBS_DIR`` says.
JOBS = Path(__file__).resolve().parents[3] / "jobs"


def jobs_dir() -> Path:
    return Path(os.environ.get("BINLAKE_JOBS_DIR") or JOBS)


class DataDocsLink(BaseOperatorLink):
    """ "Data Docs" on a quality task: its run's great-expectations report."""

    name = "Data Docs"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        # Called right after `execute` (also when it failed), on the same operator object.
        return str(getattr(operator, "report_url", "") or "")


def submit_conf(
    pipeline: dict[str, str], operator: dict[str, Any] | None, master: str = ""
) -> dict[str, Any]:
    """spark-submit's ``--conf``: the pipeline's ``spark.conf`` (the driver JVM starts before the
    job could apply it, so settings like ``spark.driver.memory`` must come here), the operator's own
    ``conf`` over it, and binlake's class archive for the driver JVM (``spark/runtime/jvm_archive.py``).

    On a local ``master`` (the connection's) the workers run binlake's interpreter, so they start
    from binlake's Python daemon, as jobs binlake starts itself do (``spark/runtime/session.py``).
    """
    return with_archive({**daemon_conf(master), **pipeline, **(operator or {})})


class BinlakeSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of ``jobs/<job>.py`` for a pipeline file.

    The source's connection settings (``airflow.source_conn_id``) reach the job as environment
    variables, its password never on a command line or in an environment (``airflow/source_secret.py``
    says how, per master); the pipeline's ``pipeline.spark.conf`` reaches spark-submit as ``--conf`` (see
    ``submit_conf``), and the job runs this interpreter (binlake's environment) on the Spark workers
    of a local master; a cluster's workers need binlake installed.
    """

    def __init__(
        self,
        *,
        job: str,
        config_path: str,
        pipeline: str,
        catalog: str,
        chunks: Sequence[str] = (),
        stream_mode: str = "continuous",
        backfill_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        args = ["--config", config_path, "--source-from-env"]
        for chunk in chunks:
            args += ["--chunk", chunk]
        if backfill_id is not None:
            args += ["--id", backfill_id]  # planned by the DAG's plan task: the job reads it
        if job == "stream":
            # Under Airflow the DDL DAG applies schema changes; the stream waits for it.
            args += ["--mode", stream_mode, "--schema-change-applier", "external"]
        kwargs.setdefault("name", f"binlake-{job}-{pipeline}")
        super().__init__(application=str(jobs_dir() / f"{job}.py"), application_args=args, **kwargs)
        self.job = job
        self.config_path = config_path
        self.pipeline = pipeline
        self.catalog = catalog
        self.chunks = list(chunks)
        self._written: dict[Any, int | None] = {}
        """Source table → rows this task wrote (None: not counted), for its lineage."""

    def execute(self, context: Any) -> Any:
        venv_bin = str(Path(sys.executable).parent)
        env = {
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
            "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        os.environ["PATH"] = env["PATH"]  # the hook looks spark-submit up on this process's PATH
        from binlake.airflow.healing_runs import HealingRuns, healing_conf  # pyiceberg: not at parse time

        config = load_pipeline(self.config_path)
        if self.job == "backfill" and healing_conf(context["dag_run"].conf):
            self.log.info(
                "a healing backfill: the stream reads it itself; this run waits for it, then checks it"
            )
            return self._summary(context, config)
        master, deploy_mode = self._master()
        source = handoff(
            source_from_connection(self.config_path), master, deploy_mode, config.airflow.kubernetes_secret
        )
        self.env_vars = {**(self.env_vars or {}), **env, **source.env}
        self.conf = {**submit_conf(config.pipeline.spark.conf, self.conf, master), **source.conf}
        self.application_args = [*(self.application_args or []), *source.args]
        if source.files:
            self.files = ",".join(f for f in (self.files, source.files) if f)
        healing = (
            HealingRuns(config, f"binlake__{self.pipeline}__backfill")
            if self.job == "stream" and config.stream.on_gap == "backfill"
            else contextlib.nullcontext()
        )
        try:
            with healing:
                super().execute(context)
        finally:
            source.remove()  # the password's file lives only while spark-submit runs
        return self._summary(context, config)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The MySQL tables this task read and the Iceberg tables it wrote (``airflow/lineage.py``);
        Airflow's OpenLineage provider calls it when the task has succeeded."""
        from binlake.airflow.lineage import pipeline_lineage

        return pipeline_lineage(load_pipeline(self.config_path), self.catalog, self._written)

    def _master(self) -> tuple[str, str | None]:
        """The master and deploy mode of the operator's Spark connection."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        connection = SparkSubmitHook(conn_id=self._conn_id)._resolve_connection()
        return str(connection["master"]), connection.get("deploy_mode")

    def _summary(self, context: Any, config: PipelineConfig) -> dict[str, Any]:
        from binlake.sink.history.companions import sink_tables
        from binlake.state.offset_names import STREAM
        from binlake.state.store import StateStore

        with StateStore(config.pipeline.resolved_state_uri) as store:
            plans = store.plans(config.pipeline.name).load()
            if self.job == "snapshot":
                wanted = set(self.chunks)
                marks = {
                    str(c.chunk.id): c.high_watermark.to_dict()
                    for p in plans
                    for c in p.chunks
                    if c.high_watermark is not None and str(c.chunk.id) in wanted
                }
                read = [p.table for p in plans if any(k.startswith(f"{p.table.name}#") for k in marks)]
                tables = sink_tables(config, read)
                self._written = {
                    p.table: sum(c.row_count or 0 for c in p.chunks if str(c.chunk.id) in wanted)
                    for p in plans
                    if any(str(c.chunk.id) in wanted for c in p.chunks)
                }
                layouts = assets.layouts(config, tables)
                assets.emit(context, self.pipeline, self.catalog, tables, layouts, chunks=len(marks))
                return {"high_watermarks": marks, "tables": sorted(tables)}
            if self.job == "backfill":
                return self._backfill_summary(store, config.pipeline.name, context)
            self._written = dict.fromkeys((p.table for p in plans), None)
            offset = store.offsets(config.pipeline.name).load(STREAM)
            # the tables the stream keeps: planned, or created or renamed in since
            kept = {p.table for p in plans} | set(store.schema_history(config.pipeline.name).current())
            tables = sink_tables(config, kept)
            assets.emit(context, self.pipeline, self.catalog, tables, assets.layouts(config, tables))
            return {"stream_offset": offset.to_dict() if offset else None}

    def _backfill_summary(self, store: Any, pipeline: str, context: Any) -> dict[str, Any]:
        from binlake.backfill.progress import unit_counts
        from binlake.state.backfills import BackfillLedger

        args = list(self.application_args or [])
        backfill_id = str(args[args.index("--id") + 1])  # rendered: the run id
        units = BackfillLedger(store).units(pipeline, backfill_id)
        self._written = {}
        for unit in units:
            self._written[unit.table] = (self._written.get(unit.table) or 0) + unit.rows
        return {"backfill_id": backfill_id, "units": unit_counts(units), "rows": sum(u.rows for u in units)}


class BinlakeQualityOperator(BaseOperator):
    """A data-quality run of the pipeline's sink tables (or of ``tables``), its Data Docs linked.

    Fails on a failed expectation under ``quality.on_failure: fail``; warns under ``warn``.
    """

    template_fields: Sequence[str] = ("tables",)
    operator_extra_links = (DataDocsLink(),)

    def __init__(self, *, config_path: str, tables: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path
        self.tables = tables
        self.report_url: str | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        from binlake.airflow.reports import report_url
        from binlake.quality.checkpoint import run_quality

        config = load_pipeline(self.config_path)
        tables = list(self.tables) if self.tables else None
        report = run_quality(config, tables, f"{context['run_id']}__{self.task_id}", self._progress)
        if report.index is not None:
            self.report_url = report_url(config.pipeline.name, report.index)
            self.log.info("Data Docs: %s (file %s)", self.report_url, report.index)
        summary = report.as_dict() | {"report_url": self.report_url}
        if not report.success:
            lines = "\n".join(report.failures())
            if config.quality.on_failure == "fail":
                raise AirflowException(f"Data quality failed ({report.index}):\n{lines}")
            self.log.warning("Data quality failed (on_failure: warn):\n%s", lines)
        return summary

    def _progress(self, number: int, total: int, result: Any) -> None:
        verdict = "ok" if result.success else "FAILED"
        self.log.info(
            "quality %d/%d %s: %d checks, %s", number, total, result.table, len(result.results), verdict
        )


class BinlakeVerifyOperator(BaseOperator):
    """``binlake verify`` of the run's form (tables, key range), its Data Docs linked.

    ``again``: verify the drifted chunks of the run's first verification after their repair. Fails
    when a chunk drifted (unless the form asks for a repair, which the next tasks make) or could not
    be verified.
    """

    operator_extra_links = (DataDocsLink(),)

    def __init__(self, *, config_path: str, again: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path
        self.again = again
        self.report_url: str | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        from binlake.airflow.reports import report_url
        from binlake.backfill.plan import KeyRange
        from binlake.verify.drift_repair import stored_report, verify_again
        from binlake.verify.report import data_docs
        from binlake.verify.verification import verify

        config = load_pipeline(self.config_path)
        params, verify_id = context["params"], str(context["run_id"])
        if self.again:
            report = verify_again(config, stored_report(config, verify_id), self._progress)
        else:
            key_range = KeyRange(params.get("key_from"), params.get("key_to"))
            report = verify(
                config, verify_id, params.get("tables") or None, key_range, progress=self._progress
            )
        index = data_docs(config, report)
        self.report_url = report_url(config.pipeline.name, index)
        self.log.info("Data Docs: %s (file %s)", self.report_url, index)
        summary = report.as_dict() | {"report_url": self.report_url}
        lines = [
            f"{v.table} chunk {v.index} {v.range}: {v.status}: "
            + (v.note or f"source {v.source_rows} rows, sink {v.sink_rows} rows at {v.at}")
            for v in report.verdicts
            if v.status in ("drifted", "unverified")
        ]
        repairing = (
            not self.again
            and bool(params.get("repair"))
            and not any(v.status == "unverified" for v in report.verdicts)
        )
        if lines and not repairing:
            raise AirflowException(f"The sink differs from the source ({index}):\n" + "\n".join(lines))
        return summary

    def _progress(self, table: Any) -> None:
        self.log.info(
            "verify %s: %d chunks, %d equal, %d drifted, %d unverified", table.table, len(table.verdicts),
            table.count("equal"), table.count("drifted"), table.count("unverified"),
        )  # fmt: skip
