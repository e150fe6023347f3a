"""``binlake plan``: validate the source, discover the tables, create their Iceberg tables, split
them into chunks, store the plan.

A table that already has a plan keeps it (a rerun resumes rather than re-splitting, so finished
chunks stay finished), unless ``replan`` is asked for. Every table is split before anything is
stored, and the plan is stored in one transaction: a failure leaves the state store as it was.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import CreateTable, SchemaChange, TableId
from binlake.schema.routes import merged_creation
from binlake.schema.table_rules import TableRules, table_rules
from binlake.schema.transforms import transform_of
from binlake.schema.type_mapping import iceberg_schema, identifier_columns
from binlake.sink.catalog import open_catalog, sink_identifier
from binlake.sink.history.companions import ensure_companions, ensure_state_table
from binlake.sink.history.state_table import state_table
from binlake.sink.layout import evolve, layout_of, layouts
from binlake.sink.metadata_applier import DEFAULT_PROPERTIES, IcebergMetadataApplier
from binlake.source.chunks.splitter import ChunkSplitter, SplitPlan
from binlake.source.server.checks import Check
from binlake.source.server.connection import connect
from binlake.source.server.discovery import captured_tables, discover
from binlake.source.server.validator import has_errors, validate
from binlake.state.store import StateStore, StoredPlan

log = logging.getLogger(__name__)


class ValidationFailedError(BinlakeError):
    """The source failed validation; the failed checks are attached."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks
        failed = [c for c in checks if c.status == "error"]
        lines = "\n".join(f"  - {c.name}: {c.message}" + (f" Fix: {c.fix}" if c.fix else "") for c in failed)
        super().__init__(f"the source failed {len(failed)} check(s); nothing was planned:\n{lines}")


def discover_tables(config: PipelineConfig, only: list[TableId] | None = None) -> list[CreateTable]:
    """The schemas of the tables the pipeline captures (or of ``only`` those), as they are now."""
    with contextlib.closing(connect(config.source)) as conn:
        return discover(conn, only if only is not None else captured_tables(conn, config.source))


def create_sink_tables(
    config: PipelineConfig, schemas: list[CreateTable], catalog: Catalog | None = None
) -> None:
    """Create the Iceberg tables of each captured table that has none (an existing one is kept;
    ``catalog``: the caller's, else the pipeline's opened here): its state table (the upsert
    table, else its history or changelog: ``sink/history/state_table.py``), then the tables its
    ``sink.modes`` rule keeps beside it."""
    applier = IcebergMetadataApplier(
        catalog or open_catalog(config),
        lambda table: sink_identifier(config, table),
        layouts(config),
    )
    for schema in schemas:
        rules = table_rules(config, schema.table)
        if (rules.soft_delete or rules.history_name) and not schema.primary_key:
            raise BinlakeError(
                f"Cannot keep soft deletes or a history for {schema.table}: it has no primary key, so "
                "a row (or a version) cannot be told from an equal one. Fix: leave `soft_delete` and "
                "`history` off for it in its `sink.modes` rule (or give the table a primary key)."
            )
        changes = sink_creation(rules, schema)
        if rules.upsert:
            for change in changes:
                applier.apply(change)
        else:
            properties = {**DEFAULT_PROPERTIES, **applier.layout(schema.table).properties}
            ensure_state_table(rules, applier.catalog, creation_schema(changes), properties)
        state = state_table(rules, applier.catalog)
        assert state is not None
        ensure_companions(rules, applier.catalog, state)


def creation_schema(changes: list[SchemaChange]) -> Schema:
    """The Iceberg schema the changes that create a sink table (``sink_creation``) give it: those
    of a routed source add its columns to the shared table, which its state table follows."""
    create = changes[0]
    assert isinstance(create, CreateTable)
    return iceberg_schema(create)


def align_layouts(config: PipelineConfig, catalog: Catalog, schemas: list[CreateTable]) -> None:
    """Bring the existing sink tables of ``schemas`` to their ``sink.layout`` rules (partition
    evolution, a new sort order: ``sink/layout.py``); tables the sink lacks are left to be created."""
    done: set[str] = set()
    for schema in schemas:
        identifier = ".".join(sink_identifier(config, schema.table))
        if identifier in done or not catalog.table_exists(identifier):
            continue
        done.add(identifier)
        table = catalog.load_table(identifier)
        changed = evolve(table, layout_of(config, schema.table), identifier_columns(table.schema()))
        if changed:
            log.info("%s: layout changed: %s", identifier, "; ".join(changed))


def sink_creation(rules: TableRules, schema: CreateTable) -> list[SchemaChange]:
    """The changes that create ``schema``'s sink table (or, routed, merge it into a shared one; or,
    transformed, the table of its projection)."""
    transform = transform_of(rules, schema)
    if transform is not None:
        return [transform.sink]
    return merged_creation(schema) if rules.routed else [schema]


def plan(
    config: PipelineConfig,
    replan: bool = False,
    progress: Callable[[TableId, int], None] | None = None,
) -> list[StoredPlan]:
    """Plan every captured table that has no plan yet (all of them with ``replan``).

    Returns:
        The stored plans of all captured tables.

    Raises:
        ValidationFailedError: the source fails a check.
        ChunkKeyError: a table cannot be split.
    """
    checks = validate(config)
    if has_errors(checks):
        raise ValidationFailedError(checks)
    with StateStore(config.pipeline.resolved_state_uri) as store:
        name = config.pipeline.name
        schemas = discover_tables(config)
        planned = {p.table for p in store.plans(name).load()}
        todo = [s for s in schemas if replan or s.table not in planned]
        plans: list[SplitPlan] = []
        if todo:
            with contextlib.closing(connect(config.source)) as conn:
                splitter = ChunkSplitter.of(conn, config.source, progress=progress)
                for schema in todo:
                    plans.append(
                        splitter.split(schema, config.source.chunk_key_columns.get(schema.table.name))
                    )
        create_sink_tables(config, schemas)
        if plans:
            store.plans(name).save(plans)
        log.info("planned %d tables (%d kept their earlier plan)", len(plans), len(schemas) - len(plans))
        return store.plans(name).load([s.table for s in schemas])
