"""Each sink table's layout: its partition spec, its sort order and its properties.

A table's layout comes from the first ``sink.layout`` rule whose ``source_table`` matches it
(``config/layout.py``), else from ``sink.bucket_count`` and the primary key. Tables are created
with it; an existing table whose rule changed *evolves* (``evolve``): Iceberg partition evolution
adds a spec — files already written keep theirs, new ones use the new one — and the sort order
is replaced. Nothing is rewritten here (``binlake maintain --rewrite-partitions`` does that).

Partitioning never decides where binlake looks for a key: merges find a key's rows by every data
file's key bounds or the key index, whatever partition (or spec) a file has, so an update that
moves a row to another partition deletes it from the old one (see docs/architecture.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, IdentityTransform, Transform, parse_transform
from pyiceberg.types import NestedField

from binlake.config import PipelineConfig
from binlake.config.layout import LayoutRule, PartitionTerm, SortTerm
from binlake.errors import BinlakeError
from binlake.events import TableId
from binlake.schema.table_rules import first_match

log = logging.getLogger(__name__)

#: The first partition field id Iceberg assigns.
_FIRST_FIELD_ID = 1000


class LayoutError(BinlakeError):
    """A layout rule does not fit its table (a missing column, a transform its type cannot take)."""


@dataclass(frozen=True)
class TableLayout:
    """How binlake lays out one sink table.

    Attributes:
        bucket_count: with no ``partition_by``, partition by ``bucket(N, first key column)``.
        properties: Iceberg table properties on top of the sink's defaults.
        partition_by: the partition fields (``sink.layout``); empty: ``bucket_count`` or none.
        sort_by: the sort order; empty: the primary key, ascending.
        rule: the description of the rule that gave it, if any (for ``plan``).
    """

    bucket_count: int | None = None
    properties: dict[str, str] = field(default_factory=dict)
    partition_by: tuple[PartitionTerm, ...] = ()
    sort_by: tuple[SortTerm, ...] = ()
    rule: str | None = None


def layout_rule(config: PipelineConfig, table: TableId) -> LayoutRule | None:
    """The first ``sink.layout`` rule whose ``source_table`` matches ``table`` fully."""
    return first_match(config.sink.layout, table.name)


def layout_of(config: PipelineConfig, table: TableId) -> TableLayout:
    """``table``'s layout under ``config``."""
    rule = layout_rule(config, table)
    properties = dict(config.sink.table_properties)
    if rule is None:
        return TableLayout(config.sink.bucket_count, properties)
    return TableLayout(
        config.sink.bucket_count,
        {**properties, **rule.properties},
        tuple(rule.partition_terms()),
        tuple(rule.sort_terms()),
        rule.description or rule.source_table,
    )


def layouts(config: PipelineConfig) -> Callable[[TableId], TableLayout]:
    return lambda table: layout_of(config, table)


def wanted_fields(
    schema: Schema, layout: TableLayout, key: Sequence[str]
) -> list[tuple[int, Transform[Any, Any], str]]:
    """(source field id, transform, field name) of each partition field ``layout`` asks for.

    Raises:
        LayoutError: a column the table lacks, or a transform its type cannot take.
    """
    if not layout.partition_by:
        if layout.bucket_count and key:
            source = schema.find_field(key[0])
            return [(source.field_id, BucketTransform(layout.bucket_count), f"{key[0]}_bucket")]
        return []
    found = []
    for term in layout.partition_by:
        source = _column(schema, term.column, f"partition_by `{term}`", layout)
        # Iceberg's own spelling of the transform (``bucket[16]``), parsed by pyiceberg
        transform = parse_transform(
            term.transform if term.width is None else f"{term.transform}[{term.width}]"
        )
        if not transform.can_transform(source.field_type):
            raise LayoutError(
                f"The layout rule {layout.rule!r} partitions by `{term}`, but `{term.column}` holds "
                f"{source.field_type} values, which {term.transform} cannot take. Fix: choose a transform "
                "for its type (day/month/year/hour: dates and times; truncate: text, integers, decimals)."
            )
        found.append((source.field_id, transform, _field_name(term)))
    return found


def partition_spec(schema: Schema, layout: TableLayout, key: Sequence[str]) -> PartitionSpec:
    """The partition spec of a new table."""
    fields = wanted_fields(schema, layout, key)
    return PartitionSpec(
        *(
            PartitionField(source_id=s, field_id=_FIRST_FIELD_ID + i, transform=t, name=n)
            for i, (s, t, n) in enumerate(fields)
        )
    )


def sort_order(schema: Schema, layout: TableLayout, key: Sequence[str]) -> SortOrder:
    """The sort order of a new table: ``sort_by``, else the key ascending."""
    terms = layout.sort_by or tuple(SortTerm(k) for k in key)
    return SortOrder(*(_sort_field(schema, t, layout) for t in terms))


def evolve(table: Table, layout: TableLayout, key: Sequence[str]) -> list[str]:
    """Bring an existing table's partition spec, sort order and the properties its layout names to
    ``layout`` (one commit); returns what changed, in words (nothing: it had them already). A
    property the layout does not name stays as the table has it (a table made copy-on-write by an
    older release stays so until its layout says otherwise)."""
    schema = table.schema()
    layout = _without_dropped_sort_columns(table, layout)
    wanted = wanted_fields(schema, layout, key)
    current = {(f.source_id, repr(f.transform)) for f in table.spec().fields}
    kept = {(s, repr(t)) for s, t, _ in wanted}
    order = sort_order(schema, layout, key)
    spec_changes = kept != current  # fields' order means nothing
    # Key columns hold no NULL: their null order is whatever an older release wrote.
    explicit = bool(layout.sort_by)
    # A table without a key, or no longer keyed, keeps the order its files have (no empty one).
    order_changes = bool(order.fields) and _order_of(order, explicit) != _order_of(
        table.sort_order(), explicit
    )
    changed = _changed_properties(table, layout)
    if not spec_changes and not order_changes and not changed:
        return []
    done = []
    with table.transaction() as tx:
        if changed:
            tx.set_properties(changed)
            done.append("properties " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))
        if spec_changes:
            with tx.update_spec() as update:
                for old in table.spec().fields:
                    if (old.source_id, repr(old.transform)) not in kept:
                        update.remove_field(old.name)
                for source_id, transform, name in wanted:
                    if (source_id, repr(transform)) not in current:
                        update.add_field(schema.find_column_name(source_id) or "", transform, name)
            done.append("partition spec " + (", ".join(str(t) for t in layout.partition_by) or "none"))
        if order_changes:
            with tx.update_sort_order() as update:
                for f in order.fields:
                    column = schema.find_column_name(f.source_id) or ""
                    if f.direction == SortDirection.ASC:
                        update.asc(column, IdentityTransform(), f.null_order)
                    else:
                        update.desc(column, IdentityTransform(), f.null_order)
            done.append(
                "sort order " + ", ".join(str(t) for t in layout.sort_by or (SortTerm(k) for k in key))
            )
    return done


def _without_dropped_sort_columns(table: Table, layout: TableLayout) -> TableLayout:
    """``layout`` without the ``sort_by`` terms of columns the table had and no longer has (the
    source dropped them under ``evolve``, which took them out of the sort order first): the table
    stays sorted by the rest, and the rule is left for its owner to mend. A column the table never
    had is a mistake in the rule, refused where the order is built."""
    have = {f.name for f in table.schema().fields}
    had = {f.name for schema in table.schemas().values() for f in schema.fields}
    dropped = [t for t in layout.sort_by if t.column not in have and t.column in had]
    if not dropped:
        return layout
    log.warning(
        "%s: the layout rule %r sorts by %s, which the table no longer has (the source dropped it): "
        "the table is sorted by the rest. Fix: take it out of the rule",
        ".".join(table.name()), layout.rule, ", ".join(f"`{t.column}`" for t in dropped),
    )  # fmt: skip
    return replace(layout, sort_by=tuple(t for t in layout.sort_by if t not in dropped))


def _changed_properties(table: Table, layout: TableLayout) -> dict[str, str]:
    """The properties ``layout`` names with another value than ``table``'s (the format version is
    set once, when the table is made)."""
    current = table.properties
    return {
        name: value
        for name, value in layout.properties.items()
        if name != "format-version" and current.get(name) != value
    }


def sort_keys(metadata: TableMetadata, fallback: Sequence[str]) -> list[tuple[str, str, str]]:
    """Arrow ``sort_by`` keys (column, order, null placement) of a table's sort order (identity
    fields of columns it still has), else ``fallback`` ascending: the order binlake writes files in."""
    order, schema = metadata.sort_order(), metadata.schema()
    keys = []
    for f in order.fields:
        name = schema.find_column_name(f.source_id)
        if name is not None and isinstance(f.transform, IdentityTransform):
            direction = "ascending" if f.direction == SortDirection.ASC else "descending"
            keys.append((name, direction, "at_start" if f.null_order == NullOrder.NULLS_FIRST else "at_end"))
    return keys or [(k, "ascending", "at_start") for k in fallback]


def sorted_rows(rows: pa.Table, metadata: TableMetadata, fallback: Sequence[str]) -> pa.Table:
    """``rows`` in the table's sort order (see ``sort_keys``)."""
    keys = [k for k in sort_keys(metadata, fallback) if k[0] in rows.column_names]
    return rows.sort_by(keys) if keys else rows


def describe(table: Table) -> dict[str, list[str]]:
    """A table's current partition fields and sort order, in the terms a rule uses."""
    schema = table.schema()
    fields = table.spec().fields
    return {
        "partition_by": [_term(str(f.transform), schema.find_column_name(f.source_id) or "") for f in fields],
        "sort_by": [
            str(SortTerm(schema.find_column_name(f.source_id) or "?", f.direction == SortDirection.ASC,
                         f.null_order == NullOrder.NULLS_FIRST))
            for f in table.sort_order().fields
        ],
    }  # fmt: skip


def _term(transform: str, column: str) -> str:
    """``bucket[16]`` of ``tenant_id`` → ``bucket(16, tenant_id)``."""
    name, _, width = transform.rstrip("]").partition("[")
    quoted = str(PartitionTerm("identity", column))[len("identity(") : -1]
    return f"{name}({width}, {quoted})" if width else f"{name}({quoted})"


def _order_of(order: SortOrder, with_nulls: bool) -> list[tuple[int, SortDirection, NullOrder | None]]:
    return [(f.source_id, f.direction, f.null_order if with_nulls else None) for f in order.fields]


def _column(schema: Schema, name: str, what: str, layout: TableLayout) -> NestedField:
    try:
        return schema.find_field(name)
    except ValueError:
        raise LayoutError(
            f"The layout rule {layout.rule!r} names `{name}` ({what}), but the sink table has no such "
            f"column (it has {', '.join(f.name for f in schema.fields)}). Fix: name one of its columns."
        ) from None


def _sort_field(schema: Schema, term: SortTerm, layout: TableLayout) -> SortField:
    source = _column(schema, term.column, f"sort_by `{term}`", layout)
    return SortField(
        source_id=source.field_id,
        transform=IdentityTransform(),
        direction=SortDirection.ASC if term.ascending else SortDirection.DESC,
        null_order=NullOrder.NULLS_FIRST if term.nulls_go_first else NullOrder.NULLS_LAST,
    )


def _field_name(term: PartitionTerm) -> str:
    if term.transform == "identity":
        return term.column
    if term.transform == "bucket":
        return f"{term.column}_bucket_{term.width}"
    if term.transform == "truncate":
        return f"{term.column}_trunc_{term.width}"
    return f"{term.column}_{term.transform}"
