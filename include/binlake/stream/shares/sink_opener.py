"""Opening a captured table's sink in the stream: its state table's writer (the upsert table's, or
without one the history's or changelog's: ``sink/history/state_table.py``), and the writers of
the changelog and history tables its ``sink.modes`` rule keeps.

One writer per sink table, shared by the routed sources that write it and kept from batch to
batch; a schema change opens the table afresh, and a name that now holds another table (a swap,
a replaced table) gets a new writer.
"""

from __future__ import annotations

from typing import Any

from binlake.config import PipelineConfig
from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.schema.table_rules import TableRules, table_rules
from binlake.schema.transforms import transform_of
from binlake.sink.compaction import CompactionPolicy
from binlake.sink.history.changelog_writer import ChangelogWriter
from binlake.sink.history.companions import ensure_companions
from binlake.sink.history.scd2_writer import HistoryWriter
from binlake.sink.history.state_table import StateTable
from binlake.sink.writer import IcebergWriter
from binlake.stream.shares.table_sink import TableSink


class SinkOpener:
    """Opens the stream's ``TableSink`` of a captured table's schema version (``__call__``) and
    keeps every writer it opened (``writers``, by sink table)."""

    def __init__(self, config: PipelineConfig, catalog: Any) -> None:
        self.config = config
        self.catalog = catalog
        self.writers: dict[str, IcebergWriter] = {}
        self._chunk_keys = dict(config.source.chunk_key_columns)
        self._compaction = CompactionPolicy() if config.stream.compact else None

    def __call__(self, schema: CreateTable, version: BinlogOffset | None = None) -> TableSink | None:
        """The sink of ``schema`` (``version``: where it began), None while its table is missing."""
        rules = table_rules(self.config, schema.table)
        writer = self._writer(rules)
        if writer is None:
            return None
        state = StateTable(writer.table, rules.state_kind, rules.signed_replay)
        ensure_companions(rules, self.catalog, state)  # created mid-stream, a rule added later
        sink = TableSink(
            schema, writer, self._chunk_keys, version, rules.routed, transform_of(rules, schema),
            state_kind=rules.state_kind, signed=rules.signed_replay,
        )  # fmt: skip
        sink.soft_delete = sink.keyed and rules.soft_delete
        self._add_changelog(sink, rules)
        if sink.keyed:
            self._add_history(sink, rules)
        return sink

    def _writer(self, rules: TableRules) -> IcebergWriter | None:
        """The writer of the table's state table (``sink/history/state_table.py``)."""
        identifier = rules.state_name
        if not self.catalog.table_exists(identifier):
            return None
        if rules.state_kind == "changelog":
            return self._changelog(identifier)
        if rules.state_kind == "history":
            return self._history(
                identifier, StateTable(self.catalog.load_table(identifier), "history").keys()
            )
        writer = self.writers.get(identifier)
        if writer is None or not refreshed(writer):
            stream = self.config.stream
            writer = self.writers[identifier] = IcebergWriter(
                self.catalog, identifier, stream.merge_manifests_at, self.config.key_index_dir,
                self._compaction, stream.keep_snapshots,
                background_upkeep=True,  # settled before the table's next batch
            )  # fmt: skip
        return writer

    def _add_changelog(self, sink: TableSink, rules: TableRules) -> None:
        rule, name = rules.changelog, rules.changelog_name
        if rule is None or name is None:
            return
        sink.changelog, sink.changelog_updates = self._changelog(name), rule.changelog_updates

    def _add_history(self, sink: TableSink, rules: TableRules) -> None:
        name = rules.history_name
        keys = sink.state.keys()
        if name is None or not keys:
            return
        sink.history = self._history(name, keys)

    def _changelog(self, name: str) -> ChangelogWriter:
        """The changelog's writer (one per table: the state table's may be it)."""
        changelog = self.writers.get(name)
        if (
            not isinstance(changelog, ChangelogWriter)
            or isinstance(changelog, HistoryWriter)
            or not refreshed(changelog)
        ):
            changelog = self.writers[name] = ChangelogWriter(
                self.catalog, name, self.config.stream.merge_manifests_at,
                keep_snapshots=self.config.stream.keep_snapshots, background_upkeep=True,
            )  # fmt: skip
        return changelog

    def _history(self, name: str, keys: list[str]) -> HistoryWriter:
        """The history's writer (one per table: the state table's may be it)."""
        history = self.writers.get(name)
        if not isinstance(history, HistoryWriter) or not refreshed(history):
            stream = self.config.stream
            history = self.writers[name] = HistoryWriter(
                self.catalog, name, keys, stream.merge_manifests_at, stream.keep_snapshots,
                background_upkeep=True, key_index_dir=self.config.key_index_dir, compaction=self._compaction,
            )  # fmt: skip
        return history


def refreshed(writer: IcebergWriter) -> bool:
    """Refresh the writer's table; False when the name now holds a different table (its UUID
    changed: renamed away and another renamed in, or dropped and created again)."""
    try:
        writer.table.refresh()
    except ValueError:  # pyiceberg: "Table UUID does not match"
        return False
    return True
