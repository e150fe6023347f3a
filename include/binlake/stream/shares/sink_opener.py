"""Opening a captured table's sink in the stream: its Iceberg table's writer, and the writers of
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
from binlake.schema.routes import routed
from binlake.schema.transforms import transform_of
from binlake.schema.type_mapping import identifier_columns
from binlake.sink.catalog import sink_name
from binlake.sink.compaction import CompactionPolicy
from binlake.sink.history.changelog import changelog_name, changelog_rule
from binlake.sink.history.changelog_writer import ChangelogWriter
from binlake.sink.history.companions import ensure_companions
from binlake.sink.history.scd2 import history_name
from binlake.sink.history.scd2_writer import HistoryWriter
from binlake.sink.history.soft_delete import soft_deletes
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
        config, table = self.config, schema.table
        writer = self._writer(sink_name(config, table))
        if writer is None:
            return None
        ensure_companions(config, self.catalog, table, writer.table)  # created mid-stream, a rule added later
        shared = routed(config, table)
        sink = TableSink(
            schema, writer, self._chunk_keys, version, shared, transform_of(config, schema, shared)
        )
        sink.soft_delete = sink.keyed and soft_deletes(config, table)
        self._add_changelog(sink)
        if sink.keyed:
            self._add_history(sink)
        return sink

    def _writer(self, identifier: str) -> IcebergWriter | None:
        if not self.catalog.table_exists(identifier):
            return None
        writer = self.writers.get(identifier)
        if writer is None or not refreshed(writer):
            stream = self.config.stream
            writer = self.writers[identifier] = IcebergWriter(
                self.catalog, identifier, stream.merge_manifests_at, self.config.key_index_dir,
                self._compaction, stream.keep_snapshots,
                background_upkeep=True,  # settled before the table's next batch
            )  # fmt: skip
        return writer

    def _add_changelog(self, sink: TableSink) -> None:
        table = sink.schema.table
        rule, name = changelog_rule(self.config, table), changelog_name(self.config, table)
        if rule is None or name is None:
            return
        changelog = self.writers.get(name)
        if not isinstance(changelog, ChangelogWriter) or not refreshed(changelog):
            changelog = self.writers[name] = ChangelogWriter(
                self.catalog, name, self.config.stream.merge_manifests_at,
                keep_snapshots=self.config.stream.keep_snapshots, background_upkeep=True,
            )  # fmt: skip
        sink.changelog, sink.changelog_updates = changelog, rule.changelog_updates

    def _add_history(self, sink: TableSink) -> None:
        name = history_name(self.config, sink.schema.table)
        keys = identifier_columns(sink.writer.table.schema())
        if name is None or not keys:
            return
        history = self.writers.get(name)
        if not isinstance(history, HistoryWriter) or not refreshed(history):
            stream = self.config.stream
            history = self.writers[name] = HistoryWriter(
                self.catalog, name, keys, stream.merge_manifests_at, stream.keep_snapshots,
                background_upkeep=True, key_index_dir=self.config.key_index_dir, compaction=self._compaction,
            )  # fmt: skip
        sink.history = history


def refreshed(writer: IcebergWriter) -> bool:
    """Refresh the writer's table; False when the name now holds a different table (its UUID
    changed: renamed away and another renamed in, or dropped and created again)."""
    try:
        writer.table.refresh()
    except ValueError:  # pyiceberg: "Table UUID does not match"
        return False
    return True
