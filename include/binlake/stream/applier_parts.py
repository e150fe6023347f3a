"""What a ``BatchApplier`` is built from, in three parts: the sink tables it writes (and what
decides which rows reach them), the gaps it heals (staged backfills, tables held back), and the
stream's hooks around each batch (the writer lease, progress, the offset's GTID anchor)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.state.store import StreamBatch
from binlake.stream.backfill import StagedBackfills
from binlake.stream.emit_filter import SnapshotFilter
from binlake.stream.repairs import StreamRepairs
from binlake.stream.schema_tracker import SchemaTracker

if TYPE_CHECKING:
    from binlake.stream.shares.table_sink import TableSink

SinkFactory = Callable[[CreateTable, BinlogOffset], "TableSink | None"]
BatchCallback = Callable[[StreamBatch], None]


@dataclass(frozen=True)
class SinkTables:
    """The sink tables a batch writes to, by source table, and what decides which rows go there."""

    sinks: dict[str, TableSink]
    snapshot_filter: SnapshotFilter | None = None
    """Drops the changes the snapshot's chunks hold already (None: no snapshot to filter)."""
    make_sink: SinkFactory | None = None
    """The sink of a table the stream meets later (created mid-stream, or after a schema change)."""
    tracker: SchemaTracker | None = None
    complete: bool = True
    """Whether the sink tables held every source row when the stream began (after a snapshot)."""


@dataclass(frozen=True)
class Healing:
    """The gaps a batch heals: staged backfills, and tables held back until one is applied."""

    backfills: StagedBackfills | None = None
    """Staged backfill units, applied when the stream reaches their high watermarks."""
    repairs: StreamRepairs | None = None
    """Tables held back from changes binlake cannot replicate, until a backfill (None: such a
    change stops the stream)."""
    on_backfill: Callable[[dict[str, int], BinlogOffset], None] | None = None
    """Called with the rows per table of backfill units applied between batches."""


@dataclass(frozen=True)
class BatchHooks:
    """The stream's own steps around each batch."""

    before_batch: Callable[[], None] | None = None
    """Before a batch commits anything (the stream checks its writer lease)."""
    on_batch: BatchCallback | None = None
    """After a batch is recorded (metrics, progress)."""
    anchor: Callable[[BinlogOffset], BinlogOffset] | None = None
    """Adds to the offset each batch records what survives a change of binlog (its GTID set;
    ``stream.failover``)."""
