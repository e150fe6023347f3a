"""The base of every pipeline config model."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict


def compile_regex(value: str) -> str:
    """``value`` if it compiles as a regular expression (a config's table patterns)."""
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"not a valid regular expression ({e})") from e
    return value


class TableRule(Protocol):
    @property
    def source_table(self) -> str: ...


Rule = TypeVar("Rule", bound=TableRule)


def first_match(rules: Iterable[Rule], table: str) -> Rule | None:
    """The first of ``rules`` whose ``source_table`` regex matches ``table`` (``database.table``)
    fully: how every per-table rule list of a pipeline file applies."""
    return next((r for r in rules if re.fullmatch(r.source_table, table)), None)


class Model(BaseModel):
    """Strict base: unknown keys are errors; configs are values, so frozen."""

    # Fields are documented by the docstring under each: pydantic keeps it as the description, which
    # the generated configuration reference (docs/configuration.md) shows.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
