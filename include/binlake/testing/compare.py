"""Source versus sink: every captured table's rows in the source and in Iceberg, compared.

Rows are compared as multisets after the type mapping (both sides as the Arrow values the sink
holds), so duplicates in tables without a key count. ``make demo`` prints this; the tests assert it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from binlake.config import PipelineConfig
from binlake.events import CreateTable, TableId
from binlake.planner import discover_tables
from binlake.schema.routes import SOURCE_TABLE_COLUMN, routed
from binlake.schema.table_rules import table_rules
from binlake.schema.transforms import Transform, transform_of
from binlake.schema.type_mapping import RowConverter
from binlake.sink.catalog import open_catalog
from binlake.sink.history.soft_delete import COLUMNS as SOFT_DELETE
from binlake.sink.history.state_table import state_table
from binlake.source.chunks.bulk_select import text_select_list
from binlake.source.server.connection import connect

Row = tuple[tuple[str, Any], ...]


def bag(rows: list[dict[str, Any]]) -> Counter[Row]:
    """Rows as a multiset (order and duplicates kept apart)."""
    return Counter(tuple(sorted(r.items())) for r in rows)


def source_rows(
    config: PipelineConfig, schema: CreateTable, where: str = "1 = 1", params: Any = ()
) -> list[dict[str, Any]]:
    """The table's rows in the source now, as the sink would hold them."""
    return source_batch(config, schema, where, params).to_pylist()  # type: ignore[no-any-return]


def source_batch(config: PipelineConfig, schema: CreateTable, where: str = "1 = 1", params: Any = ()) -> Any:
    """``source_rows`` as an Arrow record batch of the table's columns."""
    converter = RowConverter(schema)
    with contextlib.closing(connect(config.source)) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        # In each column's own precision (FLOAT as the stored float, not 6 digits of text).
        columns = text_select_list(list(schema.columns))
        cur.execute(f"SELECT {columns} FROM {schema.table.quoted()} WHERE {where}", params)
        rows = cur.fetchall()
    return converter.batch(converter.select_columns(rows))


def sink_rows(config: PipelineConfig, table: TableId) -> list[dict[str, Any]]:
    """The current rows of the table's state table (its upsert table's live rows, its history's
    current versions, or the state its changelog replays to: ``sink/history/state_table.py``)."""
    state = state_table(table_rules(config, table), open_catalog(config))
    if state is None:
        return []
    parts = list(state.rows(_without_soft_deletes(state.sink_arrow())))
    return pa.concat_tables(parts, promote_options="permissive").to_pylist() if parts else []


def _without_soft_deletes(columns: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in columns if f.name not in SOFT_DELETE.names])


def sink_rows_of(config: PipelineConfig, schema: CreateTable) -> list[dict[str, Any]]:
    """The sink's rows of one source table, in the source's columns: a routed (shared) sink table
    holds other sources' rows too (told apart by ``_source_table``), and after lenient schema
    changes a sink table may hold columns the source no longer has."""
    rows = sink_rows(config, schema.table)
    if routed(config, schema.table):
        rows = [r for r in rows if r[SOURCE_TABLE_COLUMN] == schema.table.name]
    names = schema.column_names
    return [{n: r.get(n) for n in names} for r in rows]


@dataclass(frozen=True)
class TableComparison:
    table: str
    source_rows: int
    sink_rows: int
    missing: int
    """Rows the source has and the sink lacks (counting duplicates)."""
    extra: int
    """Rows the sink has and the source does not."""

    @property
    def equal(self) -> bool:
        return self.missing == 0 and self.extra == 0


def compare(config: PipelineConfig) -> list[TableComparison]:
    """Compare every captured table of the pipeline."""
    results = []
    for schema in discover_tables(config):
        transform = transform_of(table_rules(config, schema.table), schema)
        if transform is None:
            source, sink = bag(source_rows(config, schema)), bag(sink_rows_of(config, schema))
        else:
            source, sink = _transformed(config, schema, transform)
        results.append(
            TableComparison(
                schema.table.name,
                sum(source.values()),
                sum(sink.values()),
                sum((source - sink).values()),
                sum((sink - source).values()),
            )
        )
    return results


def _transformed(
    config: PipelineConfig, schema: CreateTable, transform: Transform
) -> tuple[Counter[Row], Counter[Row]]:
    """The source's rows through the table's transform, and the sink's, without the metadata
    columns (when a row changed is the binlog's to say, not the table's)."""
    rows = pa.Table.from_batches([source_batch(config, schema)])
    projected = transform.project(rows.filter(transform.keep(rows)))
    names = [i.name for i in transform.items if not i.node.uses_metadata]
    sink = [{n: r.get(n) for n in names} for r in sink_rows(config, schema.table)]
    return bag(projected.select(names).to_pylist()), bag(sink)


def replay_changelog(rows: list[dict[str, Any]], columns: list[str]) -> Counter[Row]:
    """The rows a changelog's changes leave (``sink/history/changelog.py``), replayed in (position, order):
    ``+I``/``+U`` add a row, ``-U``/``-D`` remove one equal to it (in ``columns``).

    Raises:
        AssertionError: a ``-U``/``-D`` removes a row the replay does not hold.
    """
    state: Counter[Row] = Counter()
    for change in sorted(rows, key=lambda r: (r["__position__"], r["__order__"])):
        row = tuple(sorted((c, change.get(c)) for c in columns))
        if change["__op__"] in ("+I", "+U"):
            state[row] += 1
        else:
            assert state[row] > 0, f"{change['__op__']} of a row the changelog does not hold: {change}"
            state[row] -= 1
    return +state


def print_comparison(results: list[TableComparison]) -> None:
    width = max((len(r.table) for r in results), default=5)
    print(f"{'table':<{width}}  {'source rows':>11}  {'sink rows':>11}  result")
    for r in results:
        verdict = "equal" if r.equal else f"DIFFERENT: {r.missing} missing, {r.extra} extra"
        print(f"{r.table:<{width}}  {r.source_rows:>11,}  {r.sink_rows:>11,}  {verdict}")
