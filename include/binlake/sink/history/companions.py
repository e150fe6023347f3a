"""The tables a source table keeps beside its state table (``sink/history/state_table.py``): its
changelog (``sink/history/changelog.py``) and its history (``sink/history/scd2.py``), as
``sink.modes`` rules ask; and the state table itself where it is one of them (no upsert table)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.schema.iceberg_types import identifier_columns
from binlake.schema.table_rules import TableRules, table_rules
from binlake.sink.column_fill import holds_rows
from binlake.sink.history.changelog import ensure_changelog
from binlake.sink.history.changelog_writer import ChangelogWriter
from binlake.sink.history.scd2 import ensure_history
from binlake.sink.history.scd2_writer import HistoryWriter
from binlake.sink.history.soft_delete import ensure_columns
from binlake.sink.history.state_table import StateTable, data_schema


def sink_tables(config: PipelineConfig, tables: Iterable[TableId]) -> set[str]:
    """The sink tables ``tables`` keep: their upsert tables, changelogs and histories."""
    rules = [table_rules(config, t) for t in tables]
    return {name for r in rules for name in r.kept_names}


def ensure_state_table(
    rules: TableRules, catalog: Catalog, sink: Schema, properties: Mapping[str, str]
) -> None:
    """A table kept without an upsert table: its state table (history or changelog) created if
    missing, else given the columns of ``sink`` (the sink table's schema as an upsert table would
    have it, with the key as identifier fields) it lacks; ``properties``: the upsert table's
    would-be properties (their compression is taken)."""
    assert not rules.upsert
    sink = data_schema(sink)
    keys = identifier_columns(sink)
    if rules.state_kind == "history":
        ensure_history(catalog, rules.state_name, sink, keys)
    else:
        ensure_changelog(catalog, rules.state_name, sink, properties, keys)


def ensure_companions(rules: TableRules, catalog: Catalog, state: StateTable) -> None:
    """Give a table's state table what its ``sink.modes`` rule keeps beside it: the soft-delete
    columns of an upsert table, and its changelog and history tables — created if missing, else
    given the state table's columns they lack. A table without a primary key keeps no history."""
    if rules.soft_delete:
        ensure_columns(state.table)  # a table created mid-stream, a rule added later
    sink, keys = data_schema(state.sink_schema()), state.keys()
    if rules.changelog_name is not None and rules.changelog_name != state.identifier:
        ensure_changelog(catalog, rules.changelog_name, sink, state.table.properties, keys)
    if rules.history_name is not None and keys and rules.history_name != state.identifier:
        ensure_history(catalog, rules.history_name, sink, keys)


def companion_writers(rules: TableRules, catalog: Catalog, state: StateTable) -> list[ChangelogWriter]:
    """Writers of the changelog and history tables a table keeps (created if missing), the state
    table among them where it is one."""
    ensure_companions(rules, catalog, state)
    found: list[ChangelogWriter] = []
    if rules.changelog_name is not None:
        found.append(ChangelogWriter(catalog, rules.changelog_name))
    keys = state.keys()
    if rules.history_name is not None and keys:
        found.append(HistoryWriter(catalog, rules.history_name, keys))
    return found


#: The rename a companion took its name by (its set-aside suffix): a replay of it finds it made.
RENAMED_BY = "binlake.renamed-by"


def rename_companions(old: TableRules, new: TableRules, catalog: Catalog, aside: str) -> list[str]:
    """A renamed table's changelog and history go with its sink table: they hold its past, which
    the new name's must replay (a new, empty one would not). Each kind the old name keeps and the
    new one keeps too is renamed, after the sink table. One the new name holds with rows that are
    not the renamed table's past (a dropped table's) goes aside first, to its name + ``aside``;
    an empty one is replaced. Once: the name taken records ``aside`` (``mark_renamed``). Returns
    what moved."""
    moved = []
    pairs = ((old.changelog_name, new.changelog_name), (old.history_name, new.history_name))
    for before, after in pairs:
        if after is None or before == after or _renamed_by(catalog, after) == aside:
            continue
        renaming = before is not None and catalog.table_exists(before)
        if (renaming or before is None) and catalog.table_exists(after):
            if holds_rows(catalog.load_table(after)):
                catalog.rename_table(after, after + aside)
                moved.append(f"{after} → {after + aside}")
            else:
                catalog.drop_table(after)  # made empty for the new name before the rename came
        if renaming:
            assert before is not None
            catalog.create_namespace_if_not_exists(after.rsplit(".", 1)[0])
            catalog.rename_table(before, after)
            moved.append(f"{before} → {after}")
    return moved


def mark_renamed(catalog: Catalog, identifier: str, aside: str) -> None:
    """Record that ``identifier`` took its name by the rename of set-aside suffix ``aside``."""
    with catalog.load_table(identifier).transaction() as tx:
        tx.set_properties({RENAMED_BY: aside})


def _renamed_by(catalog: Catalog, identifier: str) -> str | None:
    if not catalog.table_exists(identifier):
        return None
    return catalog.load_table(identifier).properties.get(RENAMED_BY)
