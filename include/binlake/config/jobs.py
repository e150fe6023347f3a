"""The sections of a pipeline config for the jobs beside the stream: ``quality``, ``backfill``,
``verify``, and how Airflow runs them all (``airflow``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from binlake.config.base import Model

OnFailure = Literal["fail", "warn"]


class QualityConfig(Model):
    tables: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    """``namespace.table`` → great-expectations expectation configs."""
    on_failure: OnFailure = "fail"
    """``fail`` fails the run on a failed expectation; ``warn`` only reports it."""
    server_id: int | None = Field(default=None, ge=1)
    """Replica id of the binlog reader that reconciles row counts while a stream may run; default:
    one above ``source.server_id``'s range (it must differ from every other reader's)."""
    max_scan_bytes: int = Field(default=1024**3, ge=0)
    """Binlog bytes the row-count check reads at most (the sink's offset to now); a sink further
    behind gets no row-count check, with a note saying why."""

    def reader_server_id(self, stream_last: int) -> int:
        """Its reader's id (``stream_last``: the last of ``source.server_id``'s range)."""
        return self.server_id if self.server_id is not None else stream_last + 1


class BackfillConfig(Model):
    """Backfills: re-snapshots of chosen tables (or key ranges) while the stream runs."""

    server_id: int | None = Field(default=None, ge=1)
    """First replica id of the backfill's chunk readers (``pipeline.parallelism`` ids from here);
    default: two above ``source.server_id``'s range (after the quality reader's)."""
    unit_rows: int = Field(default=131_072, ge=1)
    """Rows one backfill task reads at most (whole chunks): the stream loads a task's rows at once
    when it applies them, so this bounds the stream driver's memory."""
    wait_timeout_s: float = Field(default=3600.0, gt=0)
    """How long ``binlake backfill --wait`` (and the Airflow DAG) waits for the stream to apply it."""

    def reader_server_ids(self, stream_last: int, parallelism: int) -> str:
        """The readers' ids as ``start-end`` (``stream_last``: the last of ``source.server_id``'s range)."""
        first = self.server_id if self.server_id is not None else stream_last + 2
        return f"{first}-{first + max(1, parallelism) - 1}"


class VerifyConfig(Model):
    """``binlake verify``: checksums of the source's chunks against the sink's."""

    server_id: int | None = Field(default=None, ge=1)
    """First replica id of its binlog readers (the roll-forward, then one per connection for
    MySQL's watermarks); default ``source.server_id``'s end + 1000. Unique among the source's
    replicas."""

    chunk_bytes: int = Field(default=1 << 20, ge=1)
    """Bytes per verified chunk when ``source.chunk_size`` is not set (at the table's average row
    length, 1,024 to 65,536 rows): smaller than the snapshot's, for each costs the server one query
    and two numbers (no slower than the snapshot's chunks, docs/benchmarks.md), and a drift is named
    within it and repaired by re-reading it alone."""

    def reader_server_id(self, stream_last: int) -> int:
        """Its first reader's id (``stream_last``: the last of ``source.server_id``'s range)."""
        return self.server_id if self.server_id is not None else stream_last + 1000


class AirflowConfig(Model):
    """How the pipeline's Airflow DAGs run (read when Airflow parses the DAG files: no ``${VAR}``)."""

    schedule: str | None = None
    """Schedule of the main DAG (``binlake__<name>``); default none: triggered from the UI."""
    backfill_schedule: str | None = None
    """Schedule of the backfill DAG (cron or preset); default none: triggered with its form."""
    verify_schedule: str | None = None
    """Schedule of the verify DAG (``binlake__<name>__verify``); default none: triggered with its form."""
    pool: str = "default_pool"
    """Airflow pool the snapshot's Spark tasks run in (bounds how many run at once)."""
    snapshot_jobs: int = Field(default=4, ge=1)
    """Spark jobs the snapshot's chunks are spread over (mapped tasks; each starts a Spark app, so
    more than the pool's slots only adds start-up time)."""
    source_conn_id: str | None = None
    """Airflow connection with the source's host, port, login and password; when set, it fills
    ``source.hostname``/``port``/``username``/``password`` (the YAML may leave them out)."""
    kubernetes_secret: str | None = None
    """``name:key`` of a Kubernetes secret holding the source password, for ``k8s://`` masters in
    cluster mode (the driver pod gets it as ``BINLAKE_SOURCE_PASSWORD``; ``airflow/source_secret.py``)."""
    spark_conn_id: str = "spark_default"
    """Airflow Spark connection: the master URL the Spark jobs are submitted to."""
    tags: list[str] = Field(default_factory=list)
    """Extra DAG tags."""
    retries: int = Field(default=2, ge=0)
    """Retries of a failed task (snapshot jobs resume; the stream restarts from its offset)."""
