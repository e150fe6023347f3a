"""Route (seed 001): many source tables into one sink table, their schemas merged.

A ``route`` rule sends every source table its regex matches (``shop_[0-9]+\\.orders_[0-9]+``) to
one sink table (``ods.orders``). A routed sink table holds the union of its sources' columns (a
column added to one shard appears in it; rows of the others have null there) and one more column,
``_source_table`` (``database.table`` of the row's source), which leads its key: keys of different
shards never collide, and each shard's rows stay apart.

Column drops, renames and incompatible type changes of one shard must not take data from the
others, so a routed table follows them leniently whatever the pipeline's behaviour (drops kept,
renames added, types widened where safe); a shard's truncate, drop or rename is logged and not
applied to the merged table.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from binlake.events import AddColumn, Column, CreateTable, SchemaChange, TableId

if TYPE_CHECKING:
    import pyarrow as pa

    from binlake.config import PipelineConfig

SOURCE_TABLE_COLUMN = "_source_table"
_SOURCE_COLUMN = Column(
    SOURCE_TABLE_COLUMN,
    "varchar",
    "varchar(129)",
    nullable=False,
    length=129,
    charset="utf8mb4",
    collation="utf8mb4_bin",
)


@dataclass(frozen=True)
class SinkTable:
    """Where a source table's rows go."""

    namespace: str
    name: str
    routed: bool
    """Whether a ``route`` rule sends the table there (a sink table other sources may share)."""

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"


class Routes:
    """The pipeline's ``route`` rules, compiled once: the sink table of every source table.

    The first rule whose regex matches ``database.table`` in full decides; otherwise the table
    keeps its name in ``sink.namespace`` (default: the source database's name).
    """

    def __init__(self, rules: tuple[tuple[str, str], ...], namespace: str | None) -> None:
        self.rules = [(re.compile(source), sink.split(".", 1)) for source, sink in rules]
        self.namespace = namespace

    def sink(self, table: TableId) -> SinkTable:
        for pattern, (namespace, name) in self.rules:
            if pattern.fullmatch(table.name):
                return SinkTable(namespace, name, routed=True)
        return SinkTable(self.namespace or table.database, table.table, routed=False)


@functools.lru_cache(maxsize=64)
def _routes(rules: tuple[tuple[str, str], ...], namespace: str | None) -> Routes:
    return Routes(rules, namespace)


def routes(config: PipelineConfig) -> Routes:
    """The compiled routes of ``config`` (compiled once per distinct set of rules)."""
    return _routes(tuple((r.source_table, r.sink_table) for r in config.route), config.sink.namespace)


def sink_table(config: PipelineConfig, table: TableId) -> SinkTable:
    """The sink table ``table``'s rows go to."""
    return routes(config).sink(table)


def routed(config: PipelineConfig, table: TableId) -> bool:
    """Whether a ``route`` rule sends ``table`` to a (possibly shared) sink table."""
    return sink_table(config, table).routed


def sink_schema(config: PipelineConfig, schema: CreateTable) -> CreateTable:
    """The schema of ``schema``'s sink table: with ``_source_table`` leading it and its key if routed."""
    return merged_schema(schema) if routed(config, schema.table) else schema


def merged_schema(schema: CreateTable) -> CreateTable:
    """``schema`` as a routed sink table holds it: ``_source_table`` first, and first in the key."""
    key = (SOURCE_TABLE_COLUMN, *schema.primary_key) if schema.primary_key else ()
    return replace(schema, columns=(_SOURCE_COLUMN, *schema.columns), primary_key=key)


def merged_creation(schema: CreateTable) -> list[SchemaChange]:
    """The changes that give a routed source's sink table its columns: a create (a no-op when
    another source made it), then each column the table may lack (each a no-op if it has it)."""
    adds = [AddColumn(schema.table, replace(c, nullable=True)) for c in schema.columns]
    return [merged_schema(schema), *adds]


def source_mask(rows: pa.Table, source: str | None) -> pa.Array | pa.ChunkedArray | None:
    """Which of ``rows`` are the source table ``source``'s (``database.table``) on a sink table
    routed sources share; None: all of them (no source given, or rows of a table no route shares)."""
    import pyarrow.compute as pc  # here: see with_source_table

    if source is None or SOURCE_TABLE_COLUMN not in rows.column_names:
        return None
    return pc.fill_null(pc.equal(rows.column(SOURCE_TABLE_COLUMN), source), False)


def with_source_table(table: TableId, rows: pa.Table) -> pa.Table:
    """``rows`` of ``table`` with the ``_source_table`` column in front."""
    import pyarrow as pa  # here: the stream's planning side imports this module, not pyarrow

    field = pa.field(SOURCE_TABLE_COLUMN, pa.string(), nullable=False)  # a key column: required
    return rows.add_column(0, field, pa.array([table.name] * rows.num_rows, pa.string()))
