"""How sink tables are laid out, per table: ``sink.layout`` rules (partitioning, sort order,
properties), and the syntax of their partition and sort terms.

The terms are Iceberg's (and Spark's DDL's): ``day(created_at)``, ``bucket(16, tenant_id)``,
``truncate(4, sku)``, ``identity(region)`` or ``region``, ``year``/``month``/``hour``; a sort term is a
column with an optional direction and null order (``created_at DESC NULLS LAST``). Column names
with odd characters go in backticks. Whether a column exists is checked when the table is known
(``sink/layout.py``); the syntax here, when the file is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator

from binlake.config.base import Model, TableRegex

Transform = Literal["identity", "year", "month", "day", "hour", "bucket", "truncate"]
_TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
_COLUMN = r"(?:`(?P<quoted>(?:[^`]|``)+)`|(?P<bare>[^\s(),`]+))"
_CALL = re.compile(rf"^\s*(?P<transform>[A-Za-z]+)\s*\(\s*(?:(?P<width>\d+)\s*,\s*)?{_COLUMN}\s*\)\s*$")
_BARE = re.compile(rf"^\s*{_COLUMN}\s*$")
_SORT = re.compile(
    rf"^\s*{_COLUMN}(?:\s+(?P<direction>ASC|DESC))?(?:\s+NULLS\s+(?P<nulls>FIRST|LAST))?\s*$", re.IGNORECASE
)


@dataclass(frozen=True)
class PartitionTerm:
    """One partition field: ``transform`` of ``column`` (``width``: bucket count or truncate width)."""

    transform: Transform
    column: str
    width: int | None = None

    def __str__(self) -> str:
        column = _quoted(self.column)
        if self.width is not None:
            return f"{self.transform}({self.width}, {column})"
        return f"{self.transform}({column})"


@dataclass(frozen=True)
class SortTerm:
    """One sort field: ``column``, ascending or not, nulls first or last (Iceberg's default: nulls
    first ascending, last descending)."""

    column: str
    ascending: bool = True
    nulls_first: bool | None = None

    @property
    def nulls_go_first(self) -> bool:
        return self.ascending if self.nulls_first is None else self.nulls_first

    def __str__(self) -> str:
        nulls = "FIRST" if self.nulls_go_first else "LAST"
        return f"{_quoted(self.column)} {'ASC' if self.ascending else 'DESC'} NULLS {nulls}"


def parse_partition_term(text: str) -> PartitionTerm:
    """``day(created_at)`` → ``PartitionTerm("day", "created_at")``.

    Raises:
        ValueError: not a partition term (the message lists the forms).
    """
    match = _CALL.match(text) or _BARE.match(text)
    if match is None:
        raise ValueError(f"`{text}` is not a partition term: {_FORMS}")
    column = _unquoted(match["quoted"] or match["bare"])
    called = match.groupdict()
    transform = (called.get("transform") or "identity").lower()
    width = int(called["width"]) if called.get("width") is not None else None
    if transform not in _TRANSFORMS:
        raise ValueError(f"`{text}`: unknown transform `{called['transform']}`: {_FORMS}")
    if transform in ("bucket", "truncate") and (width is None or width < 1):
        raise ValueError(f"`{text}`: {transform} takes a width first, e.g. {transform}(16, {column})")
    if transform not in ("bucket", "truncate") and width is not None:
        raise ValueError(f"`{text}`: {transform} takes the column alone, e.g. {transform}({column})")
    return PartitionTerm(transform, column, width)  # type: ignore[arg-type]


def parse_sort_term(text: str) -> SortTerm:
    """``created_at DESC NULLS LAST`` → ``SortTerm("created_at", False, False)``.

    Raises:
        ValueError: not a sort term.
    """
    match = _SORT.match(text)
    if match is None:
        raise ValueError(
            f"`{text}` is not a sort term: a column, then optionally ASC or DESC, then NULLS FIRST or "
            "NULLS LAST (`created_at DESC NULLS LAST`)"
        )
    nulls = match["nulls"]
    return SortTerm(
        _unquoted(match["quoted"] or match["bare"]),
        (match["direction"] or "ASC").upper() == "ASC",
        None if nulls is None else nulls.upper() == "FIRST",
    )


_FORMS = (
    "a column, or identity(c), year(c), month(c), day(c), hour(c), bucket(N, c), truncate(W, c) "
    "(backticks around odd column names)"
)


def _unquoted(name: str) -> str:
    return name.replace("``", "`")


def _quoted(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "`" + name.replace("`", "``") + "`"


#: Table properties binlake manages itself: a value set here would break what it relies on.
_MANAGED = {
    "commit.retry.num-retries": "binlake retries a conflicting commit itself, after checking the commit "
    "is not in already (exactly once); Iceberg's blind retry could commit a batch twice",
    "schema.name-mapping.default": "binlake keeps the name mapping of the files it adds",
}
_CHOICES = {
    "format-version": ("2",),  # binlake writes v2 position deletes
    "write.merge.mode": ("copy-on-write", "merge-on-read"),
    "write.delete.mode": ("copy-on-write", "merge-on-read"),
    "write.parquet.compression-codec": ("zstd", "snappy", "gzip", "lz4", "brotli", "uncompressed"),
}
_METRICS_MODE = re.compile(r"^(none|counts|full|truncate\(\d+\))$")
_COLUMN_PREFIXES = ("write.parquet.bloom-filter-enabled.column.", "write.metadata.metrics.column.")


def known_table_properties() -> set[str]:
    """The Iceberg table properties pyiceberg acts on (its ``TableProperties``), and Iceberg's
    merge mode (which binlake's writers act on)."""
    from pyiceberg.table import TableProperties

    found = {
        value
        for name, value in vars(TableProperties).items()
        if name.isupper() and not name.endswith(("_DEFAULT", "_PREFIX")) and isinstance(value, str)
        and "." in value
    }  # fmt: skip
    return {*found, "write.merge.mode", "format-version"}


def check_table_properties(properties: dict[str, str]) -> dict[str, str]:
    """Refuse properties pyiceberg does not know (a typo would be silently ignored), those binlake
    manages, and values outside a property's choices.

    Raises:
        ValueError: the first wrong property, with what is valid.
    """
    known = known_table_properties()
    for key, value in properties.items():
        if key in _MANAGED:
            raise ValueError(f"`{key}` cannot be set: {_MANAGED[key]}")
        if key not in known and not key.startswith(_COLUMN_PREFIXES):
            raise ValueError(
                f"`{key}` is not a table property pyiceberg acts on (a typo would be ignored silently); "
                f"known: {', '.join(sorted(known - set(_MANAGED)))}"
            )
        choices = _CHOICES.get(key)
        if choices is not None and value not in choices:
            raise ValueError(f"`{key}: {value}`: must be one of {', '.join(choices)}")
        if key.endswith(("-bytes", "-limit", "-count-to-merge")) and not (value.isdigit() and int(value) > 0):
            raise ValueError(f"`{key}: {value}`: must be a positive whole number")
        if key.startswith("write.metadata.metrics.") and not _METRICS_MODE.match(value):
            raise ValueError(f"`{key}: {value}`: must be none, counts, full or truncate(N)")
    return properties


class LayoutRule(Model):
    """How the sink tables of the source tables ``source_table`` matches are laid out
    (``sink/layout.py``). The first rule that matches a table applies; a table no rule matches is
    sorted by its key (and bucketed by it with ``sink.bucket_count``)."""

    source_table: TableRegex
    """Regex over ``database.table`` (full match)."""
    partition_by: list[str] = Field(default_factory=list)
    """Iceberg partition fields on any column of the sink table: ``day(created_at)``,
    ``bucket(16, tenant_id)``, ``truncate(4, sku)``, ``region`` (identity), ``year``, ``month``,
    ``hour``. Changing it for an existing table adds a partition spec (partition evolution): new
    files use it, old files keep theirs until ``binlake maintain --rewrite-partitions``."""
    sort_by: list[str] = Field(default_factory=list)
    """The table's sort order, in which binlake writes and compacts its files: columns with
    ``ASC``/``DESC`` and ``NULLS FIRST``/``LAST``; empty: the primary key."""
    properties: dict[str, str] = Field(default_factory=dict)
    """Iceberg table properties of these tables, over ``sink.table_properties``."""
    description: str | None = None
    """What the rule is for (shown by ``plan``)."""

    @field_validator("properties")
    @classmethod
    def _check_properties(cls, value: dict[str, str]) -> dict[str, str]:
        return check_table_properties(value)

    @field_validator("partition_by")
    @classmethod
    def _check_partition_by(cls, value: list[str]) -> list[str]:
        terms = [parse_partition_term(v) for v in value]
        seen = [(t.transform, t.column) for t in terms]
        if len(set(seen)) != len(seen):
            raise ValueError("a partition field is listed twice")
        return value

    @field_validator("sort_by")
    @classmethod
    def _check_sort_by(cls, value: list[str]) -> list[str]:
        columns = [parse_sort_term(v).column for v in value]
        if len(set(columns)) != len(columns):
            raise ValueError("a column is listed twice")
        return value

    def partition_terms(self) -> list[PartitionTerm]:
        return [parse_partition_term(v) for v in self.partition_by]

    def sort_terms(self) -> list[SortTerm]:
        return [parse_sort_term(v) for v in self.sort_by]
