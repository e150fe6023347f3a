"""What the sink keeps of a table's changes, per table: ``sink.modes`` rules.

- ``upsert``: the table's current state (every commit replaces the changed keys' rows).
- ``changelog``: an append-only table with one row per change (``sink/history/changelog.py``).
- ``history``: one row per version of each key, SCD type 2 (``sink/history/scd2.py``).

Any of them alone or together. The table that holds the source table's current rows — the upsert
table, else the history's current versions, else the state the changelog replays to — is its
*state table* (``sink/history/state_table.py``): the snapshot, backfills and ``verify`` work on it.

``soft_delete`` keeps the rows the source deletes in the upsert table, marked
(``sink/history/soft_delete.py``).

The first rule whose ``source_table`` matches a table applies; a table no rule matches is kept as
``upsert`` alone.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from binlake.config.base import Model, TableRegex

Mode = Literal["upsert", "changelog", "history"]


def _upsert() -> list[Mode]:
    return ["upsert"]


class ModeRule(Model):
    """The sink tables the source tables ``source_table`` matches feed."""

    source_table: TableRegex
    """Regex over ``database.table`` (full match)."""
    mode: list[Mode] = Field(default_factory=_upsert)
    """Any of: ``upsert``, the current state, in the sink table; ``changelog``, every change as a
    row of ``<sink table><changelog_suffix>``, appended exactly once in the same batch
    (``sink/history/changelog.py``); ``history``, one row per version of each key (SCD type 2) in
    ``<sink table><history_suffix>``, its versions closed and opened in the same batch
    (``sink/history/scd2.py``; tables with a primary key). Without ``upsert`` no table of the
    sink table's own name is kept: the history (else the changelog) holds the current rows the
    snapshot, backfills and ``verify`` work on."""
    changelog_updates: Literal["both", "after"] = "both"
    """An update in the changelog: its before image (``-U``) and after image (``+U``), as Flink CDC
    writes them, or the after image alone."""
    changelog_suffix: str = Field(default="_changelog", pattern=r"^[A-Za-z0-9_]+$")
    """The changelog table's name: the sink table's, with this added."""
    history_suffix: str = Field(default="_history", pattern=r"^[A-Za-z0-9_]+$")
    """The history table's name: the sink table's, with this added."""
    soft_delete: bool = False
    """Keep a row the source deletes in the upsert table, with ``__deleted__`` true and the time
    and binlog position of its delete (``__deleted_at__``, ``__deleted_position__``); a re-insert
    of its key makes it live again (``sink/history/soft_delete.py``). Tables with a primary key only."""
    description: str | None = None
    """What the rule is for (shown by ``plan``)."""

    @field_validator("mode", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("mode")
    @classmethod
    def _check_mode(cls, value: list[Mode]) -> list[Mode]:
        if len(set(value)) != len(value):
            raise ValueError("a mode is listed twice")
        if not value:
            raise ValueError("names no mode: list `upsert`, `changelog` or `history` (one or more)")
        return value

    @model_validator(mode="after")
    def _soft_deletes_need_the_upsert_table(self) -> ModeRule:
        if self.soft_delete and not self.upsert:
            raise ValueError(
                "`soft_delete` keeps deleted rows, marked, in the upsert table, and the rule keeps "
                f"none (`mode: {self.mode}`). Fix: add `upsert` to `mode`, or leave `soft_delete` off "
                "(a changelog's `-D` rows and a history's closed versions keep what was deleted)"
            )
        return self

    @property
    def upsert(self) -> bool:
        return "upsert" in self.mode

    @property
    def changelog(self) -> bool:
        return "changelog" in self.mode

    @property
    def history(self) -> bool:
        return "history" in self.mode
