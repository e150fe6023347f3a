"""The expectations of one sink table: binlake's own (row count, key) and the pipeline YAML's.

Every suite holds:

- the row count the source had at the sink's offset (``reconcile``), as an exact range;
- each primary-key column not null, and the key unique (a routed table's key leads with
  ``_source_table``); tables without a primary key have no key expectations;
- the expectations written under ``quality.tables.<namespace.table>`` in the pipeline YAML.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from binlake.errors import ConfigError

#: kwargs that name the columns an expectation reads.
_COLUMN_KWARGS = ("column", "column_A", "column_B")
_COLUMN_LIST_KWARGS = ("column_list", "column_set")


@dataclass(frozen=True)
class Expectation:
    """One great-expectations expectation, as configured (``type`` is its snake_case name)."""

    type: str
    kwargs: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    def columns(self) -> set[str] | None:
        """The columns it reads (None: it may read any, e.g. a table-level expectation with a query)."""
        if self.type.startswith("expect_table_row_count"):
            return set()
        names = {str(self.kwargs[k]) for k in _COLUMN_KWARGS if k in self.kwargs}
        for key in _COLUMN_LIST_KWARGS:
            names |= {str(c) for c in self.kwargs.get(key, [])}
        return names or None


def key_expectations(key_columns: Sequence[str]) -> list[Expectation]:
    """Primary key columns not null, and the key unique."""
    why = {"binlake": "the primary key of the sink table"}
    found = [Expectation("expect_column_values_to_not_be_null", {"column": c}, why) for c in key_columns]
    if len(key_columns) == 1:
        found.append(Expectation("expect_column_values_to_be_unique", {"column": key_columns[0]}, why))
    elif key_columns:
        found.append(
            Expectation("expect_compound_columns_to_be_unique", {"column_list": list(key_columns)}, why)
        )
    return found


def configured(table: str, entries: Sequence[dict[str, Any]]) -> list[Expectation]:
    """The YAML's expectations of ``table`` (``expectation_type`` + ``kwargs`` [+ ``meta``]).

    Raises:
        ConfigError: an entry lacks ``expectation_type`` or has keys binlake does not know.
    """
    found = []
    for number, entry in enumerate(entries, 1):
        unknown = set(entry) - {"expectation_type", "type", "kwargs", "meta"}
        kind = entry.get("expectation_type") or entry.get("type")
        if not kind or unknown:
            raise ConfigError(
                f"quality.tables.{table}[{number}]: expected `expectation_type` (e.g. "
                f"expect_column_values_to_not_be_null) and `kwargs`, found keys {sorted(entry)}."
            )
        found.append(Expectation(str(kind), dict(entry.get("kwargs") or {}), dict(entry.get("meta") or {})))
    return found


def needed_columns(expectations: Sequence[Expectation], all_columns: Sequence[str]) -> list[str]:
    """The columns the suite reads, in table order: reading only those keeps wide tables cheap."""
    wanted: set[str] = set()
    for expectation in expectations:
        columns = expectation.columns()
        if columns is None:
            return list(all_columns)
        wanted |= columns
    return [c for c in all_columns if c in wanted]
