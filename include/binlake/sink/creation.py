"""The sink tables of the captured tables: created where missing (``binlake plan``, a stream that
starts without a snapshot, a table the snapshot reads again), and brought to their layout rules.

A table's state table comes first (its upsert table, else its history or changelog:
``sink/history/state_table.py``), then the tables its ``sink.modes`` rule keeps beside it.
"""

from __future__ import annotations

import logging

from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import CreateTable, SchemaChange
from binlake.schema.iceberg_types import iceberg_schema, identifier_columns
from binlake.schema.routes import merged_creation
from binlake.schema.table_rules import TableRules, table_rules
from binlake.schema.transforms import transform_of
from binlake.sink.catalog import open_catalog, sink_identifier
from binlake.sink.history.companions import ensure_companions, ensure_state_table
from binlake.sink.history.state_table import state_table
from binlake.sink.layout import evolve, layout_of, layouts
from binlake.sink.metadata_applier import DEFAULT_PROPERTIES, IcebergMetadataApplier

log = logging.getLogger(__name__)


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
