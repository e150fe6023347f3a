"""What the sink keeps of a table's changes, per table: ``sink.modes`` rules.

- ``upsert``: the table's current state (every commit replaces the changed keys' rows).
- ``changelog``: beside it, an append-only table with one row per change (``sink/history/changelog.py``).
- ``history``: beside it, one row per version of each key, SCD type 2 (``sink/history/scd2.py``).

``soft_delete`` keeps the rows the source deletes in the upsert table, marked
(``sink/history/soft_delete.py``).

The first rule whose ``source_table`` matches a table applies; a table no rule matches is kept as
``upsert`` alone.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from binlake.config_base import Model, compile_regex

Mode = Literal["upsert", "changelog", "history"]


def _upsert() -> list[Mode]:
    return ["upsert"]


class ModeRule(Model):
    """The sink tables the source tables ``source_table`` matches feed."""

    source_table: str = Field(min_length=1)
    """Regex over ``database.table`` (full match)."""
    mode: list[Mode] = Field(default_factory=_upsert)
    """``upsert`` (the current state) and, beside it, ``changelog``: every change as a row of
    ``<sink table><changelog_suffix>``, appended exactly once in the same batch
    (``sink/history/changelog.py``),
    and/or ``history``: one row per version of each key (SCD type 2) in
    ``<sink table><history_suffix>``, its versions closed and opened in the same batch
    (``sink/history/scd2.py``; tables with a primary key).
    The upsert table stays: the snapshot, backfills and ``verify`` work on it."""
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

    @field_validator("source_table")
    @classmethod
    def _check_regex(cls, value: str) -> str:
        return compile_regex(value)

    @field_validator("mode", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("mode")
    @classmethod
    def _check_mode(cls, value: list[Mode]) -> list[Mode]:
        if len(set(value)) != len(value):
            raise ValueError("a mode is listed twice")
        if "upsert" not in value:
            raise ValueError(
                "must include `upsert`: the snapshot, backfills and verify work on the upsert table "
                "(write `mode: [upsert, changelog]`)"
            )
        return value

    @property
    def changelog(self) -> bool:
        return "changelog" in self.mode

    @property
    def history(self) -> bool:
        return "history" in self.mode
