"""What a pipeline file's per-table rules say of one source table, looked up once.

Each per-table rule list (``route``, ``transform``, ``sink.modes``, ``sink.layout``) applies by its
first rule whose ``source_table`` regex matches ``database.table`` fully (``first_match``).
``table_rules`` looks up the route, transform and mode rules at once: a table's sink table, its
transform rule and what the sink keeps of it travel as one value instead of the whole config being
asked again at each use. The layout rule is read where tables are created or altered
(``sink/layout.layout_of``). See docs/architecture.md, "Per-table rules".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from binlake.config import PipelineConfig, TransformRule
from binlake.config.modes import ModeRule
from binlake.events import TableId
from binlake.schema.routes import SinkTable, sink_table
from binlake.schema.shadow_tables import shadow_base


class _Rule(Protocol):
    @property
    def source_table(self) -> str: ...


Rule = TypeVar("Rule", bound=_Rule)
#: Which of a table's sink tables holds its current rows (``sink/history/state_table.py``).
StateKind = Literal["upsert", "history", "changelog"]


def first_match(rules: Iterable[Rule], table: str) -> Rule | None:
    """The first of ``rules`` whose ``source_table`` regex matches ``table`` (``database.table``)
    fully: how every per-table rule list of a pipeline file applies."""
    return next((r for r in rules if re.fullmatch(r.source_table, table)), None)


def transform_rule(config: PipelineConfig, table: TableId) -> TransformRule | None:
    """The first ``transform`` rule whose ``source_table`` matches ``table``'s ``database.table``,
    or, for an online schema-change tool's shadow table (``_t_gho``…), ``t``'s (its rows become
    ``t``'s at the cut-over, so they go through ``t``'s transform from the start)."""
    found = first_match(config.transform, table.name)
    base = shadow_base(table) if found is None and config.transform else None
    return transform_rule(config, base) if base is not None else found


@dataclass(frozen=True)
class TableRules:
    """One source table's rules: where its rows go and what the sink keeps of them."""

    table: TableId
    sink: SinkTable
    transform: TransformRule | None
    mode: ModeRule | None
    chunk_key: str | None
    """``source.chunk_key_columns``' column for a table without a primary key."""

    @property
    def sink_name(self) -> str:
        """``namespace.table`` of the sink table: the upsert table's name, which its changelog's
        and history's names extend (kept or not: see ``state_name``)."""
        return self.sink.identifier

    @property
    def upsert(self) -> bool:
        """Whether the sink keeps the upsert table (the table's current rows under its own name)."""
        return self.mode is None or self.mode.upsert

    @property
    def state_kind(self) -> StateKind:
        """Which table holds the current rows: the upsert table, else the history, else the changelog."""
        if self.upsert:
            return "upsert"
        return "history" if self.history_name is not None else "changelog"

    @property
    def state_name(self) -> str:
        """``namespace.table`` of the state table: the one the snapshot, backfills, ``verify`` and
        quality checks work on (``sink/history/state_table.py``)."""
        found = {"upsert": self.sink_name, "history": self.history_name, "changelog": self.changelog_name}
        name = found[self.state_kind]
        assert name is not None
        return name

    @property
    def signed_replay(self) -> bool:
        """Whether a changelog of the table replays signed (both images of each update), not by key."""
        return self.changelog is None or self.changelog.changelog_updates == "both"

    @property
    def kept_names(self) -> list[str]:
        """``namespace.table`` of every sink table the table keeps: the state table first."""
        names = [self.sink_name] if self.upsert else [self.state_name]
        return names + [n for n in self.companion_names if n not in names]

    @property
    def routed(self) -> bool:
        """Whether a ``route`` rule sends the table to a (possibly shared) sink table."""
        return self.sink.routed

    @property
    def soft_delete(self) -> bool:
        """Whether the sink keeps the rows the source deletes (``__deleted__``)."""
        return self.mode is not None and self.mode.soft_delete

    @property
    def changelog(self) -> ModeRule | None:
        """The mode rule, if it keeps a changelog."""
        return self.mode if self.mode is not None and self.mode.changelog else None

    @property
    def changelog_name(self) -> str | None:
        """``namespace.table`` of the changelog table, if the table keeps one."""
        rule = self.changelog
        return self.sink_name + rule.changelog_suffix if rule is not None else None

    @property
    def history_name(self) -> str | None:
        """``namespace.table`` of the history table, if the table keeps one."""
        rule = self.mode
        return self.sink_name + rule.history_suffix if rule is not None and rule.history else None

    @property
    def companion_names(self) -> list[str]:
        """``namespace.table`` of the changelog and history tables the table keeps (without an
        upsert table, the state table is one of them)."""
        return [n for n in (self.changelog_name, self.history_name) if n is not None]

    @property
    def beside_state(self) -> list[str]:
        """The changelog and history tables the table keeps besides its state table."""
        return [n for n in self.companion_names if n != self.state_name]

    @property
    def whole_images(self) -> bool:
        """Whether the stream reads before images whole: a changelog shows them, soft deletes
        keep them, a history's changes pass a transform's filter by them (a key alone would fail
        a filter on other columns, and leave NULL in a NOT NULL column)."""
        return self.changelog is not None or self.soft_delete or self.history_name is not None


def table_rules(config: PipelineConfig, table: TableId) -> TableRules:
    """``table``'s rules under ``config``."""
    return TableRules(
        table,
        sink_table(config, table),
        transform_rule(config, table),
        first_match(config.sink.modes, table.name),
        dict(config.source.chunk_key_columns).get(table.name),
    )
