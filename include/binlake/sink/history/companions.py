"""The tables a sink table may keep beside it: its changelog (``sink/history/changelog.py``) and its
history (``sink/history/scd2.py``), as ``sink.modes`` rules ask."""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.schema.type_mapping import identifier_columns
from binlake.sink.catalog import sink_name
from binlake.sink.history.changelog import changelog_name, ensure_changelog
from binlake.sink.history.changelog_writer import ChangelogWriter
from binlake.sink.history.scd2 import ensure_history, history_name
from binlake.sink.history.scd2_writer import HistoryWriter
from binlake.sink.history.soft_delete import ensure_columns, soft_deletes


def companion_names(config: PipelineConfig, table: TableId) -> list[str]:
    """``namespace.table`` of the changelog and history tables ``table`` keeps."""
    return [n for n in (changelog_name(config, table), history_name(config, table)) if n is not None]


def sink_tables(config: PipelineConfig, tables: Iterable[TableId]) -> set[str]:
    """The sink tables of ``tables``, with the changelog and history tables they keep."""
    return {name for t in tables for name in (sink_name(config, t), *companion_names(config, t))}


def ensure_companions(config: PipelineConfig, catalog: Catalog, table: TableId, upsert: Table) -> None:
    """Give ``table``'s sink table (``upsert``) what its ``sink.modes`` rule keeps beside it: the
    soft-delete columns, its changelog table and its history table — created if missing, else
    given the sink table's columns they lack. A table without a primary key keeps no history."""
    if soft_deletes(config, table):
        ensure_columns(upsert)  # a table created mid-stream, a rule added later
    name = changelog_name(config, table)
    if name is not None:
        ensure_changelog(catalog, name, upsert)
    name = history_name(config, table)
    keys = identifier_columns(upsert.schema())
    if name is not None and keys:
        ensure_history(catalog, name, upsert, keys)


def companion_writers(
    config: PipelineConfig, catalog: Catalog, table: TableId, upsert: Table
) -> list[ChangelogWriter]:
    """Writers of the changelog and history tables ``table`` keeps (created if missing)."""
    ensure_companions(config, catalog, table, upsert)
    found: list[ChangelogWriter] = []
    name = changelog_name(config, table)
    if name is not None:
        found.append(ChangelogWriter(catalog, name))
    name = history_name(config, table)
    keys = identifier_columns(upsert.schema())
    if name is not None and keys:
        found.append(HistoryWriter(catalog, name, keys))
    return found
