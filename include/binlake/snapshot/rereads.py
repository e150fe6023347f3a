"""Tables a snapshot reads again from the start (a new, empty sink table and a new split).

- its schema changed between two runs or under a wave (each chunk checks after its read);
- a table statement (TRUNCATE, a swap, a schema change) lies among its chunk reads (``spans``);
- its sink table lost chunks the plan holds as read (a run killed while it replaced the table);
- it is captured and has no plan (created or renamed into ``source.tables`` since the plan).
A planned table the source no longer has leaves the plan.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from typing import Any

from binlake.config import PipelineConfig
from binlake.events import CreateTable, TableId, table_from_dict
from binlake.faults import crash_point
from binlake.planner import discover_tables
from binlake.schema.iceberg_types import iceberg_schema
from binlake.schema.routes import routed
from binlake.schema.table_rules import table_rules
from binlake.sink.catalog import open_catalog
from binlake.sink.creation import create_sink_tables
from binlake.sink.exactly_once import SOURCE_SCHEMA_KEY
from binlake.sink.history.state_table import state_table
from binlake.sink.writer import IcebergWriter
from binlake.snapshot import SnapshotError
from binlake.snapshot.spans import straddling_statements, table_spans
from binlake.snapshot.switch import switch_offset, switched
from binlake.source.chunks.splitter import ChunkSplitter
from binlake.source.server.connection import connect
from binlake.source.server.discovery import same_schema
from binlake.state.store import StateStore, StoredPlan

log = logging.getLogger(__name__)

#: Times a table is read again from the start because its schema changed, before giving up.
RESTARTS = 3


def changed_under(
    config: PipelineConfig, schemas: dict[TableId, CreateTable]
) -> dict[TableId, CreateTable | None]:
    """The tables that no longer have their schema in ``schemas`` (as far as reading their rows
    goes), with their schema now (None: gone); one discovery for all of them."""
    now = {s.table: s for s in discover_tables(config, list(schemas))}
    return {t: now.get(t) for t, s in schemas.items() if t not in now or not same_schema(now[t], s)}


def forget_gone(
    config: PipelineConfig, store: StateStore, schemas: dict[TableId, CreateTable]
) -> list[TableId]:
    """Planned tables the source no longer has (dropped, or renamed — a table renamed into
    ``source.tables`` is a new table, ``_new_tables``), while the snapshot is unfinished: their
    plans and their partly read sink tables go, as a drop the stream met would take them."""
    name = config.pipeline.name
    plans = store.plans(name).load()
    if switched(store, name, plans):
        return []  # the stream meets later drops in the binlog
    gone = [p.table for p in plans if p.table not in schemas]
    if not gone:
        return []
    if any(routed(config, t) for t in gone):
        raise SnapshotError(
            f"{', '.join(map(str, gone))} left the source during the snapshot, and shares a sink table "
            "with other sources (`route`). Fix: `binlake plan --replan` and `binlake snapshot`."
        )
    catalog = open_catalog(config)
    for table in gone:
        identifiers = _drop_sink_tables(config, catalog, table)
        log.warning(
            "%s was dropped or renamed during its snapshot: its plan and its partly read sink tables %s "
            "are removed (a table it was renamed to, if captured, is read as a new table)", table,
            ", ".join(identifiers),
        )  # fmt: skip
    store.plans(name).delete(gone)
    return gone


def new_tables(
    store: StateStore, pipeline: str, schemas: dict[TableId, CreateTable]
) -> dict[TableId, CreateTable]:
    """Captured tables without a plan while the snapshot is unfinished: created or renamed into
    ``source.tables`` since the plan (the stream starts at the snapshot's first high watermark, so
    it may never meet their CREATE). They are planned and read like the others."""
    plans = store.plans(pipeline).load()
    if switched(store, pipeline, plans):
        return {}
    planned = {p.table for p in plans}
    return {t: s for t, s in schemas.items() if t not in planned}


def straddled(
    config: PipelineConfig, store: StateStore, schemas: dict[TableId, CreateTable]
) -> dict[TableId, CreateTable | None]:
    """Once every chunk is read, before the switch: the tables a table statement (a TRUNCATE, a
    swap, a schema change) changed among their chunk reads, with their schema now (None: gone).
    Their chunks hold rows from both sides of it, which no stream can make right
    (``snapshot.spans``): they are read again."""
    name = config.pipeline.name
    plans = store.plans(name).load()
    if switch_offset(plans) is None or switched(store, name, plans):
        return {}  # unfinished (checked when the last chunk is read), or checked when it switched
    spans = table_spans(plans)
    log.info("checking the binlog over the snapshot's span for table statements among its chunk reads")
    found = straddling_statements(config, spans)
    for table, at in sorted(found.items()):
        log.warning(
            "a table statement changed %s at %s, after some of its chunks were read and before others: "
            "reading it again", table, at,
        )  # fmt: skip
    now = {s.table: s for s in discover_tables(config, list(found))} if found else {}
    return {t: now.get(t) for t in found}


def changed_tables(
    config: PipelineConfig, store: StateStore, plans: list[StoredPlan], schemas: dict[TableId, CreateTable]
) -> list[TableId]:
    """Tables of an unfinished snapshot to read again from the start: their sink table holds (or
    was made for) another schema than the table has now (a DDL between two runs, or since the
    plan), or no longer holds chunks the plan says are read (a run killed while it replaced the
    table, or the table dropped by hand)."""
    if switch_offset(store.plans(config.pipeline.name).load()) is not None:
        return []  # a finished snapshot: the stream meets later DDL in the binlog
    catalog = open_catalog(config)
    changed = []
    for plan in plans:
        schema = schemas.get(plan.table)
        rules = table_rules(config, plan.table)
        if schema is None:
            continue  # gone: reported when its chunks are read
        state = state_table(rules, catalog)
        if state is None:
            changed.append(plan.table)
            continue
        recorded = state.table.properties.get(SOURCE_SCHEMA_KEY)
        if recorded is not None:
            if not same_schema(table_from_dict(json.loads(recorded)), schema):
                changed.append(plan.table)
        elif routed(config, plan.table):
            continue
        elif _fields(state.sink_schema()) != _fields(iceberg_schema(schema)) or _lost_chunks(
            IcebergWriter(catalog, state.identifier), plan
        ):
            changed.append(plan.table)
    return changed


def _lost_chunks(sink: IcebergWriter, plan: StoredPlan) -> bool:
    """Whether chunks the plan holds as read are not in the sink table (a new, empty table)."""
    finished = {str(c.chunk.id) for c in plan.chunks if c.status == "finished"}
    if not finished:
        return False
    committed = {c.chunk_id for c in sink.committed_chunk_commits()}
    return not finished <= committed


def _drop_sink_tables(config: PipelineConfig, catalog: Any, table: TableId) -> list[str]:
    """Drop the sink tables ``table`` keeps (its snapshot is unfinished: they hold nothing but the
    rows it read, its changelog and history included); those dropped."""
    dropped = []
    for identifier in table_rules(config, table).kept_names:
        if catalog.table_exists(identifier):
            catalog.drop_table(identifier)
            dropped.append(identifier)
    return dropped


def _fields(schema: Any) -> list[tuple[str, str]]:
    return [(f.name, str(f.field_type)) for f in schema.fields]


def restart(
    config: PipelineConfig, store: StateStore, schema: CreateTable, restarts: Counter[TableId], why: str
) -> None:
    """Read ``schema``'s table (again) from the start with that schema: a new, empty sink table and
    a new split (committed chunks hold rows of the old schema, or of both sides of a statement)."""
    table = schema.table
    restarts[table] += 1
    if restarts[table] > RESTARTS:
        raise SnapshotError(
            f"`{table}` would be read from the start a {RESTARTS + 1}th time in one run ({why}). Fix: run "
            "`binlake snapshot` again once the changes to it are done."
        )
    new = not store.plans(config.pipeline.name).load([table])
    if routed(config, table) and not new:
        raise SnapshotError(
            f"`{table}` must be read from the start ({why}), and it shares a sink table with other "
            "sources (`route`), which binlake cannot read again alone. Fix: `binlake plan "
            "--replan` and `binlake snapshot` for every source of that sink table."
        )
    catalog = open_catalog(config)
    # The sink tables first, then the plan: killed in between, the next run finds the plan's read
    # chunks missing from the new state table (``_lost_chunks``) and starts the table over again.
    if not routed(config, table):
        _drop_sink_tables(config, catalog, table)  # a new table's name may carry stale sink tables
    create_sink_tables(config, [schema])
    crash_point("snapshot-restart")
    with contextlib.closing(connect(config.source)) as conn:
        split = ChunkSplitter.of(conn, config.source).split(
            schema, config.source.chunk_key_columns.get(table.name)
        )
    store.plans(config.pipeline.name).save([split])
    log.warning("reading %s from the start (%d chunks): %s", table, len(split.chunks), why)
