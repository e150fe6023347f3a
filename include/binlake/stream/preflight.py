"""The stream's start-up, as one step: everything checked and resolved before the first batch,
returned as one small value the rest of the stream uses.

- the captured tables (discovery) and the refusal of those with cascading foreign keys (the server
  changes their child rows without row events);
- the start position (``stream/startup.resolve_start``: resumed — re-anchored by GTID after a
  failover — or by ``source.startup_mode``; checked against the binlog the server still holds);
- the lineage's origin (where the Spark checkpoint of this start lives);
- the schemas at the start (the schema history, begun from the server for a new stream), and the
  sink tables' layouts brought to their ``sink.layout`` rules;
- the snapshot filter, while the stream is still inside the snapshot's range.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyiceberg.catalog import Catalog

from binlake.config import PipelineConfig
from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.sink.creation import align_layouts, create_sink_tables
from binlake.source.server.facts import ServerFacts, server_facts
from binlake.source.server.foreign_keys import CascadingKey, cascade_fix
from binlake.state.offset_names import ORIGIN, STREAM
from binlake.state.reanchoring import snapshot_applies
from binlake.state.store import StateStore
from binlake.stream.emit_filter import SnapshotFilter
from binlake.stream.schema_tracker import SchemaTracker
from binlake.stream.startup import Start, StartupError, resolve_start

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Preflight:
    """What the stream starts from."""

    start: Start
    server: ServerFacts
    """The source as the stream found it (one session's answers)."""
    origin: BinlogOffset
    """Where this lineage of the stream began (its Spark checkpoint is named after it)."""
    schemas: list[CreateTable]
    """The captured tables' schemas at ``start``."""
    tracker: SchemaTracker
    snapshot_filter: SnapshotFilter | None


def preflight(config: PipelineConfig, store: StateStore, catalog: Catalog) -> Preflight:
    """Check and resolve everything the stream needs before its first batch (``catalog``: the
    stream's, opened once).

    Raises:
        StartupError: a captured table has a cascading foreign key, no table matches, or the start
            cannot be resolved (``resolve_start``'s errors, ``BinlogPurgedError`` too).
    """
    server = server_facts(config.source)  # one session answers every check
    refuse_cascading_keys(server.cascading)
    start = resolve_start(config, store, catalog, config.source.server_id.end, server)
    tracker = SchemaTracker(config, store)
    schemas = _schemas(config, catalog, tracker, server.tables, start.offset)
    align_layouts(config, catalog, schemas)  # a changed `sink.layout` rule takes effect at a restart
    plans = store.plans(config.pipeline.name).load()
    snapshot_filter = (
        SnapshotFilter(config.source, plans, {s.table.name: s for s in schemas})
        if plans and snapshot_applies(config, store)
        else None
    )
    origin = _origin(store, config.pipeline.name, start)
    return Preflight(start, server, origin, schemas, tracker, snapshot_filter)


def _origin(store: StateStore, pipeline: str, start: Start) -> BinlogOffset:
    origin = store.offsets(pipeline).load(ORIGIN)
    if origin is None:
        # A new lineage: a restart resumes from here (a `latest-offset` start keeps its "latest").
        origin = start.offset
        store.offsets(pipeline).save(ORIGIN, origin)
        store.offsets(pipeline).save(STREAM, origin)
    return origin


def refuse_cascading_keys(found: list[CascadingKey]) -> None:
    """Captured tables whose foreign keys change rows the binlog never shows stop the stream."""
    if found:
        raise StartupError(
            "Cannot stream: " + "; ".join(k.describe() for k in found) + ". The server changes those child "
            "rows itself and writes only the parent's row to the binlog, so the sink would keep rows the "
            f"source no longer has. Fix: {cascade_fix(found[0])}."
        )


def _schemas(
    config: PipelineConfig,
    catalog: Catalog,
    tracker: SchemaTracker,
    discovered: list[CreateTable],
    start: BinlogOffset,
) -> list[CreateTable]:
    """The captured tables' schemas at ``start``: from the schema history once it has begun,
    else (a new stream) the server's, which then begin the history.

    Tables are never taken from today's server on a resume: the binlog between the stream's
    position and now may still hold their CREATE, ALTER or RENAME, which the stream applies when
    it gets there.
    """
    store = tracker.store
    if not store.schema_history(config.pipeline.name).versions():
        if not discovered:
            raise StartupError(
                f"No table of the source matches `source.tables` {config.source.tables}: nothing to stream."
            )
        create_sink_tables(config, discovered, catalog)  # modes without a snapshot start from empty tables
        tracker.bootstrap(discovered, start)
    known = {v.table for v in store.schema_history(config.pipeline.name).versions()}
    unknown = sorted(str(s.table) for s in discovered if s.table not in known)
    if unknown:
        log.warning(
            "tables %s match `source.tables` but the stream has no history of them (they existed before "
            "it began and were not captured): their changes are not streamed. Fix: snapshot them "
            "(a backfill), or re-plan the pipeline.",
            unknown,
        )
    return list(tracker.schemas_at(start).values())
