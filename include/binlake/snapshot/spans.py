"""Where the snapshot read each table, in binlog positions: its chunks' low and high watermarks.

A table statement (ALTER, TRUNCATE, RENAME, DROP, CREATE …) of a snapshotted table that ends at
position ``at`` lies

- **before** the table's snapshot: every chunk was read after it (each low watermark at or after
  ``at``). The snapshot holds its effect, so the stream neither applies the statement again nor
  decodes the table's rows before the table's first high watermark (they are written with the
  columns the table had then, and the snapshot holds them anyway);
- **after** it: every chunk was read before it (each high watermark before ``at``). The stream
  applies it in order, like any later change;
- **among** the chunks: some were read before it and some after, or one around it. No order of
  applying it is right (a TRUNCATE applied to the whole sink table deletes the rows of chunks read
  after it; skipped, it leaves the rows of chunks read before), so the snapshot job reads such a
  table again (``spark/snapshot_job.py``) and no finished snapshot keeps a table in this case.

The stream uses these spans only while the snapshot's watermarks are positions of the binlog it
reads (``startup_mode: initial``, not re-anchored after a failover).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.source.binlog.scan import transactions
from binlake.source.server.connection import connect
from binlake.state.reanchoring import snapshot_applies
from binlake.state.store import StateStore, StoredPlan


@dataclass(frozen=True)
class TableSpan:
    """One table's chunk watermarks (every chunk finished)."""

    lows: tuple[BinlogOffset | None, ...]
    """Low watermarks (None: not recorded, by a version of binlake before they were)."""
    highs: tuple[BinlogOffset, ...]

    @property
    def first_high(self) -> BinlogOffset:
        """Up to here the snapshot holds every change of the table."""
        return min(self.highs)

    @property
    def start(self) -> BinlogOffset:
        """Where the first chunk began reading (its high watermark where no low one is known)."""
        return min(low or high for low, high in zip(self.lows, self.highs, strict=True))

    def holds(self, at: BinlogOffset) -> bool:
        """Whether a statement ending at ``at`` lies before the table's snapshot (see above)."""
        return self.first_high >= at

    def straddles(self, at: BinlogOffset) -> bool:
        """Whether chunks were read both before and after a statement ending at ``at``."""
        read_after = all(low is not None and low >= at for low in self.lows)
        read_before = all(high < at for high in self.highs)
        return not read_after and not read_before


def table_spans(plans: Sequence[StoredPlan]) -> dict[TableId, TableSpan]:
    """The spans of the tables whose every chunk has been read."""
    spans = {}
    for plan in plans:
        highs = [c.high_watermark for c in plan.chunks]
        if plan.chunks and all(h is not None for h in highs):
            lows = tuple(c.low_watermark for c in plan.chunks)
            spans[plan.table] = TableSpan(lows, tuple(h for h in highs if h is not None))
    return spans


def stream_spans(config: PipelineConfig, store: StateStore) -> dict[TableId, TableSpan]:
    """The spans the stream must respect ({} once they no longer apply)."""
    if not snapshot_applies(config, store):
        return {}
    return table_spans(store.plans(config.pipeline.name).load())


def straddling_statements(
    config: PipelineConfig, spans: dict[TableId, TableSpan]
) -> dict[TableId, BinlogOffset]:
    """The tables a table statement changed among their chunk reads, with where the first one
    ended (a scan of the binlog over the snapshot's span that reads only event headers and the
    statements' text: the planning side's scan).

    """
    # Here, not at the top: the stream's planning side imports this module and must stay light.
    from binlake.schema.history import tables_changed
    from binlake.source.ddl.parser import UnparsedDdlError, parse_ddl
    from binlake.source.server.discovery import server_charsets

    if not spans:
        return {}
    with contextlib.closing(connect(config.source)) as conn:
        charsets = server_charsets(conn)
    start = min(s.start for s in spans.values())
    end = max(max(s.highs) for s in spans.values())
    found: dict[TableId, BinlogOffset] = {}
    for boundary in transactions(config.source, config.source.server_id.end, start, end):
        if boundary.statement is None:
            continue
        try:
            # No schema to read it against (the one in force then is unknown): an ALTER of a
            # snapshotted table that changes columns names it through the refusal.
            statement, database = boundary.statement, boundary.database
            changes = parse_ddl(statement, database, lambda _t: None, charsets, spans.__contains__)
            named = {t for c in changes for t in tables_changed(c)}
        except UnparsedDdlError as e:
            named = {e.table} if e.table is not None else set()
        for table in named:
            if table in spans and spans[table].straddles(boundary.offset):
                found.setdefault(table, boundary.offset)
    return found
