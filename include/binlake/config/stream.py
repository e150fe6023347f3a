"""The stream's section of a pipeline config (``stream``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from binlake.config.base import Model


class StreamConfig(Model):
    trigger_interval_s: float = Field(default=10.0, gt=0)
    """Seconds between micro-batches of a continuous stream."""
    max_bytes_per_batch: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Binlog bytes one micro-batch reads at most (it always holds at least one transaction):
    bounds a catch-up batch's memory and time."""
    segment_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    """Binlog bytes per parallel segment: a batch is cut into about this size, at transaction
    boundaries, into at most 2 × ``pipeline.parallelism`` segments."""
    checkpoint_dir: Path | None = None
    """Folder of the Spark checkpoints; default ``<work_dir>/checkpoints``."""
    merge_manifests_at: int = Field(default=32, ge=0)
    """Merge a table's manifests once a batch leaves it with this many (0: never): every commit
    adds one, and scans and merges read them all."""
    keep_snapshots: int = Field(default=100, ge=0)
    """Snapshots of each table the stream keeps (time travel that far back; 0: all, left to
    ``binlake maintain``): the stream expires the oldest beyond it (``sink/snapshot_retention.py``),
    since every commit reads and rewrites metadata that holds them all. Snapshots recording
    snapshot or backfill chunks are kept."""
    compact: bool = True
    """Compact merge-on-read tables inside the stream (``sink/compaction.py``): after a batch, a
    bounded share of the files with many deleted rows, the small files of new rows and the delete
    files are rewritten in a commit of their own, so files and delete files stay bounded;
    ``false``: leave it to ``binlake maintain``."""
    read_ahead: bool = True
    """While the driver applies a batch of a backlog, the executors read the next one
    (``spark/read_ahead.py``; used only when Spark's next batch ends exactly there); ``false``: one
    batch at a time."""
    executor_merge_from: Annotated[int, Field(ge=0)] | Literal["auto"] | None = "auto"
    """A merge-on-read keyed table's share of a batch from this many changes is merged on the
    executors (``stream/shares/bucket_merge.py``): only files and keys reach the driver (0: always;
    null: never). ``auto``: 20,000 on a cluster; never on a ``local`` Spark master, whose executors
    are the driver's own cores — a shuffle frees none of them, and they are better used reading
    the next batch ahead (``stream.read_ahead``)."""

    def merge_from(self, master: str) -> int | None:
        """``executor_merge_from`` as it applies on the Spark ``master``."""
        if self.executor_merge_from != "auto":
            return self.executor_merge_from
        return None if master.startswith("local") else 20_000

    schema_change_applier: Literal["inline", "external"] = "inline"
    """Who applies a schema change the stream meets: ``inline`` (the stream itself) or ``external``
    (the stream records it and waits: Airflow's DDL DAG applies it)."""
    schema_change_timeout_s: float = Field(default=180.0, gt=0)
    """How long the stream waits for an external applier before it fails, naming the change."""
    metrics_address: str | None = Field(default=None, pattern=r"^[^:\s]*:\d+$")
    """``host:port`` where the stream serves its Prometheus metrics (``/metrics``); off unless set
    (``:9464``: every interface)."""
    metrics_textfile: Path | None = None
    """A file the stream rewrites with its metrics after each batch (node_exporter's textfile
    collector reads it): the way for a stream Airflow runs, whose address moves between workers."""
    on_gap: Literal["stop", "backfill"] = "backfill"
    """What the stream does at a change it cannot replicate (a statement-logged write, an insert
    whose default it cannot read, a column only the server could fill): ``backfill`` holds that
    table (behind, never wrong), reads the backfill the stop would name by itself and goes on once
    it is applied — other tables never wait; ``stop`` stops with the fix for a person to run."""
    column_decoder: bool = True
    """Decode rows events a block at a time into Arrow columns (``source/binlog/column_decoder.py``, for
    tables of the common types; ~2.5x less CPU); ``false``: row by row, as before (a way back if a
    value ever decodes differently: please report it)."""
