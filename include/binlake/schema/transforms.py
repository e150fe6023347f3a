"""Transforms (Flink CDC's ``transform`` block): per source table, a projection (columns kept,
renamed or computed) and a filter (rows kept), in MySQL's SQL, evaluated the same way wherever
rows travel.

``compile_transform`` checks a rule against one table's schema — unknown columns, expressions
binlake cannot evaluate exactly (``schema.transform_sql``), a primary key not kept — and gives a
``Transform``: the sink table's schema (``sink``: kept columns as they are, computed ones typed from
their expression, so the sink is created from the projection) and the evaluation of rows, on whole
Arrow columns (``schema.transform_eval``).

Metadata columns a projection may name (a filter may not: the source's rows do not hold them):
``__database__`` and ``__table__`` (the source table's); of the binlog event that last changed the
row: ``__op_ts__`` (its time, UTC), ``__binlog_position__`` (``binlog.000123:4567``) — both null
for rows a snapshot or backfill read — and ``__data_event_type__`` (Flink CDC's name and values:
``+I`` for an inserted row, and for rows a snapshot or backfill read, as Flink CDC's snapshot
emits them; ``+U`` for an updated one, including an update that moved the row into the filter or
gave it its key). Deleted rows leave the sink, so ``-D`` and ``-U`` never appear.

Where it runs: the snapshot's and backfills' tasks (``spark.snapshot_task``), the stream's merges
(``stream.shares.table_sink``, ``stream.shares.bucket_merge``: a last upsert the filter drops
deletes its key),
the quality row count (the server counts ``WHERE`` the filter) and ``verify`` (the server sums its
own evaluation of the projection; the roll-forward goes through this one).

**Schema changes** of a transformed table (``sink_changes_through``): a projection that names its
columns ignores added columns (``*`` takes them); a change of a column the transform does not read
goes to the sink only through ``*``; a column it reads that is dropped, renamed or retyped stops
the stream with the transform named (its expressions would no longer mean what they did).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from binlake.events import (
    AddColumn,
    AlterColumnType,
    AlterPrimaryKey,
    Column,
    CreateTable,
    DropColumn,
    RenameColumn,
    SchemaChange,
)
from binlake.offsets import packed_files, packed_positions
from binlake.schema.table_rules import TableRules
from binlake.schema.transform_eval import TransformInexactError, arrow_of, evaluate
from binlake.schema.transform_rules import RULES
from binlake.schema.transform_sql import (
    Compiler,
    Node,
    SqlType,
    TransformError,
    parse_filter,
    parse_projection,
)

DATABASE, TABLE, OP_TS, POSITION = "__database__", "__table__", "__op_ts__", "__binlog_position__"
EVENT_TYPE = "__data_event_type__"
INSERTED, UPDATED = "+I", "+U"
METADATA = {
    DATABASE: SqlType("text", collation="utf8mb4_bin", length=64),
    TABLE: SqlType("text", collation="utf8mb4_bin", length=64),
    OP_TS: SqlType("timestamp"),
    POSITION: SqlType("text", collation="utf8mb4_bin", length=80),
    EVENT_TYPE: SqlType("text", collation="utf8mb4_bin", length=2),
}
_T = TypeVar("_T")
_Changes = dict[str, pa.Array] | None
#: Metadata of the row's last change (for rows a snapshot read: null, and ``+I``).
CHANGE_METADATA = (OP_TS, POSITION, EVENT_TYPE)


@dataclass(frozen=True)
class TransformSpec:
    """One rule as configured: ``projection`` (None: every column) and ``filter`` (None: every row)."""

    projection: str | None = None
    filter: str | None = None
    description: str = ""


@dataclass(frozen=True)
class _Item:
    name: str
    node: Node
    column: Column
    star: bool = False


class Transform:
    """A rule compiled for one table (see the module docstring)."""

    def __init__(
        self, spec: TransformSpec, table: CreateTable, items: list[_Item], condition: Node | None, where: str
    ) -> None:
        self.spec = spec
        self.table = table
        self.items = items
        self.condition = condition
        self.where = where
        self.sink = CreateTable(table.table, tuple(i.column for i in items), table.primary_key)
        """The sink table's schema: the projection's columns (the primary key kept under its names:
        ``compile_transform`` refuses others)."""
        self.star = any(i.star for i in items)
        """Whether the projection takes every column (``*``): then it takes added ones too."""
        self.source_columns = sorted(frozenset().union(*(i.node.columns for i in items)) | (
            condition.columns if condition is not None else frozenset()))  # fmt: skip
        """The source columns it reads."""

    def keep(self, rows: pa.Table, changes: dict[str, pa.Array] | None = None) -> pa.Array:
        """Which rows pass the filter (TRUE; NULL and FALSE do not), as a boolean array."""
        return self._located(rows, changes, self._keep)

    def project(self, rows: pa.Table, changes: dict[str, pa.Array] | None = None) -> pa.Table:
        """``rows`` (the source's columns) as rows of ``sink``; ``changes``: the metadata of each
        row's last change (``CHANGE_METADATA``; none: rows a snapshot read)."""
        return self._located(rows, changes, self._project)

    def _located(
        self, rows: pa.Table, changes: dict[str, pa.Array] | None, run: Callable[[pa.Table, _Changes], _T]
    ) -> _T:
        """``run(rows, changes)``; a value it cannot evaluate exactly stops with the row's key and
        the binlog position of its change named (the row found by halving the rows: only on the
        way to a stop)."""
        try:
            return run(rows, changes)
        except TransformInexactError as e:

            def fails(start: int, length: int) -> bool:
                part = {k: v.slice(start, length) for k, v in (changes or {}).items()}
                try:
                    run(rows.slice(start, length), part)
                except TransformInexactError:
                    return True
                return False

            lo, hi = 0, rows.num_rows
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if fails(lo, mid - lo) else (mid, hi)
            named = self._row(rows, changes, lo) if fails(lo, 1) else ""  # a row alone, or none
            raise TransformInexactError(str(e).replace(" Fix: ", f" {named}Fix: ", 1)) from None

    def _row(self, rows: pa.Table, changes: dict[str, pa.Array] | None, i: int) -> str:
        """Names row ``i`` (its key, and the binlog position of its change, where known)."""
        key = {k: rows.column(k)[i].as_py() for k in self.table.primary_key}
        at = (changes or {}).get(POSITION)
        if not key:
            return ""
        where = f", changed at binlog position {at[i]}" if at is not None and at[i].is_valid else ""
        return f"The row: key {key}{where}. "

    def _keep(self, rows: pa.Table, changes: dict[str, pa.Array] | None) -> pa.Array:
        if self.condition is None:
            return pa.array([True] * rows.num_rows, pa.bool_())
        value = evaluate(self.condition, rows, self._metadata(rows, changes), self.where)
        truth = value if value.type == pa.bool_() else pc.not_equal(value, pa.scalar(0, value.type))
        return pc.fill_null(truth, False)

    def _project(self, rows: pa.Table, changes: dict[str, pa.Array] | None) -> pa.Table:
        metadata = self._metadata(rows, changes)
        arrays = []
        for item in self.items:
            if item.node.op == "column":  # carried as it is: the source's own type and values
                arrays.append(rows.column(item.node.value))
            else:
                arrays.append(evaluate(item.node, rows, metadata, f"{self.where}, column `{item.name}`"))
        return pa.Table.from_arrays(arrays, names=[i.name for i in self.items])

    def upserts(
        self,
        rows: pa.Table,
        times: pa.Array | None = None,
        at: pa.Array | None = None,
        binlog: str = "binlog",
        ops: pa.Array | None = None,
    ) -> tuple[pa.Table, pa.Table]:
        """A batch's last rows per key (the source's columns; ``times``: their events' epoch
        seconds; ``at``: their ``records.position``, in binlog files named ``binlog``.NNNNNN;
        ``ops``: their events' kinds, ``insert`` or ``update``): the
        projected rows the filter keeps, and the keys of those it does not — the sink may hold an
        earlier version of them that passed, so they are deleted (an update that moves a row out of
        the filter is a delete; into it, an insert)."""
        changes = {}
        if times is not None:
            changes[OP_TS] = pc.multiply(times.cast(pa.int64()), 1_000_000).cast(pa.timestamp("us", "UTC"))
        if at is not None:
            changes[POSITION] = position_texts(at, binlog)
        if ops is not None:
            changes[EVENT_TYPE] = pc.if_else(pc.equal(ops, "update"), UPDATED, INSERTED)
        kept = self.keep(rows, changes)
        dropped = rows.filter(pc.invert(kept)).select(list(self.table.primary_key))
        return self.project(rows.filter(kept), {k: v.filter(kept) for k, v in changes.items()}), dropped

    def _metadata(self, rows: pa.Table, changes: dict[str, pa.Array] | None) -> dict[str, pa.Array]:
        n = rows.num_rows
        found = changes or {}
        return {
            DATABASE: pa.array([self.table.table.database] * n, pa.string()),
            TABLE: pa.array([self.table.table.table] * n, pa.string()),
            OP_TS: found.get(OP_TS, pa.nulls(n, pa.timestamp("us", "UTC"))),
            POSITION: found.get(POSITION, pa.nulls(n, pa.string())),
            EVENT_TYPE: found.get(EVENT_TYPE, pa.array([INSERTED] * n, pa.string())),
        }


def position_texts(at: pa.Array, binlog: str) -> pa.Array:
    """``records.position`` values as ``binlog.000123:4567`` (MySQL's file numbering: six digits)."""
    offsets = pc.cast(packed_positions(at), pa.string())
    return pc.binary_join_element_wise(packed_files(at, binlog), offsets, ":")


def compile_transform(spec: TransformSpec, table: CreateTable) -> Transform:
    """``spec`` checked against ``table`` and ready to evaluate.

    Raises:
        TransformError: the rule cannot be applied exactly (the message names the expression and
            the fix).
    """
    where = f"transform of {table.table}" + (f" ({spec.description})" if spec.description else "")
    compiler = Compiler(table, METADATA, where, RULES)
    items: list[_Item] = []
    for expression in parse_projection(spec.projection or "*", where):
        items += _items(compiler, table, expression, where)
    names = [i.name.lower() for i in items]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TransformError(f"{where}: the projection names {', '.join(twice)} more than once. Fix: give "
                             "each column its own name (`AS`).")  # fmt: skip
    kept = {i.name for i in items if i.node.op == "column" and i.node.value == i.name}
    lost = [k for k in table.primary_key if k not in kept]
    if lost:
        raise TransformError(
            f"{where}: the projection leaves out (or renames) the primary key column(s) {', '.join(lost)}, "
            "by which updates and deletes find their rows in the sink. Fix: keep them under their own names."
        )
    condition = None
    if spec.filter is not None:
        condition = compiler.compile(parse_filter(spec.filter, where))
        if not (condition.type.numeric or condition.type.kind == "null"):
            raise TransformError(f"{where}: the filter `{spec.filter}` is {condition.type.kind}, not a "
                                 "condition. Fix: compare it with a value.")  # fmt: skip
    if condition is not None and condition.uses_metadata:
        raise TransformError(f"{where}: the filter `{spec.filter}` reads metadata columns, which the source "
                             "table does not hold. Fix: filter on the table's own columns.")  # fmt: skip
    if not table.primary_key and any(
        i.node.value in CHANGE_METADATA for i in items if i.node.op == "metadata"
    ):
        raise TransformError(
            f"{where}: `{OP_TS}`, `{POSITION}` and `{EVENT_TYPE}` need a primary key (without one, a row's "
            "changes net out and keep no time, position or kind). Fix: leave them out."
        )
    return Transform(spec, table, items, condition, where)


def _items(compiler: Compiler, table: CreateTable, expression: exp.Expression, where: str) -> list[_Item]:
    if isinstance(expression, exp.Star) or (isinstance(expression, exp.Column) and expression.is_star):
        return [_Item(c.name, Node("column", SqlType("any"), value=c.name), c, True) for c in table.columns]
    name = expression.alias_or_name if isinstance(expression, exp.Alias | exp.Column) else None
    inner = expression.this if isinstance(expression, exp.Alias) else expression
    if not name:
        raise TransformError(f"{where}: `{expression.sql(dialect='mysql')}` needs a name in the sink. Fix: "
                             "add `AS <name>`.")  # fmt: skip
    if isinstance(inner, exp.Column) and inner.name.lower() in {c.name.lower() for c in table.columns}:
        source = table.column(next(c.name for c in table.columns if c.name.lower() == inner.name.lower()))
        node = Node("column", SqlType("any"), value=source.name, columns=frozenset({source.name}))
        return [_Item(name, node, _renamed(source, name))]
    node = compiler.compile(inner)
    return [_Item(name, node, sink_column(name, node.type))]


def _renamed(column: Column, name: str) -> Column:
    return replace(column, name=name, auto_increment=False, generated=False)


def sink_column(name: str, t: SqlType) -> Column:
    """A computed column's definition (its sink type follows from it as from a source column's)."""
    if t.kind == "int":
        return Column(
            name, "bigint", "bigint(20) unsigned" if t.unsigned else "bigint(20)", unsigned=t.unsigned
        )
    if t.kind == "decimal":
        return Column(
            name, "decimal", f"decimal({t.precision},{t.scale})", precision=t.precision, scale=t.scale
        )
    if t.kind == "double":
        return Column(name, "double", "double")
    if t.kind == "bool":
        return Column(name, "tinyint", "tinyint(1)")
    if t.kind == "text":
        return Column(name, "longtext", "longtext", collation=t.collation or "utf8mb4_bin", charset="utf8mb4")
    if t.kind in ("date", "datetime", "timestamp"):
        return Column(
            name, t.kind, t.kind if t.kind == "date" else f"{t.kind}(6)", fsp=None if t.kind == "date" else 6
        )
    if t.kind == "binary":
        return Column(name, "longblob", "longblob")
    return Column(name, "longtext", "longtext", collation="utf8mb4_bin", charset="utf8mb4")  # NULL


def transform_of(rules: TableRules, schema: CreateTable) -> Transform | None:
    """``schema``'s transform under its table's ``rules`` (None: no rule matches it).

    Raises:
        TransformError: the rule cannot be applied to this table exactly.
    """
    rule = rules.transform
    if rule is None:
        return None
    if rules.routed:
        raise TransformError(
            f"transform of {schema.table}: the table is also routed to a shared sink table, and binlake does "
            "not combine the two. Fix: remove it from one of `transform` and `route`."
        )
    transform = _compiled(TransformSpec(rule.projection, rule.filter, rule.description or ""), schema)
    chunk_key = rules.chunk_key
    if not schema.primary_key and chunk_key and chunk_key not in transform.sink.column_names:
        raise TransformError(
            f"{transform.where}: the projection leaves out `{chunk_key}`, the chunk key by which snapshots, "
            "backfills and verify find this table's rows (it has no primary key). Fix: keep it."
        )
    return transform


@functools.lru_cache(maxsize=256)
def _compiled(spec: TransformSpec, schema: CreateTable) -> Transform:
    return compile_transform(spec, schema)


def sink_changes_through(
    transform: Transform, change: SchemaChange, after: CreateTable | None
) -> list[SchemaChange] | None:
    """The sink changes for ``change`` of a transformed table (see the module docstring); None:
    those of the schema change behaviour, as for any table.

    Raises:
        TransformError: ``change`` alters a column the transform reads.
    """
    if isinstance(change, CreateTable):
        return [compile_transform(transform.spec, change).sink]
    star = transform.star
    if isinstance(change, AlterPrimaryKey):
        raise TransformError(
            f"{transform.where}: the source's primary key changes to ({', '.join(change.primary_key)}), but "
            "the sink table's rows are the transform's projection keyed by the old one. Fix: change the "
            f"transform for the new key, then backfill the table (`binlake backfill --table "
            f"{transform.table.table}`)."
        )
    if isinstance(change, AddColumn):
        return None if star else []
    if isinstance(change, DropColumn):
        name = change.name
    elif isinstance(change, RenameColumn):
        name = change.old_name
    elif isinstance(change, AlterColumnType):
        name = change.column.name
    else:
        return None
    if isinstance(change, AlterColumnType) and after is not None and _widens(transform, change):
        return _widened_sink(transform, after)
    if name in transform.source_columns or name in transform.table.primary_key:
        raise TransformError(
            f"{transform.where}: the source's change of column `{name}` (a {type(change).__name__}) alters a "
            "column the transform reads, so its expressions would no longer mean what they did. Fix: change "
            "the transform for the new schema, then backfill the table (`binlake backfill --table "
            f"{transform.table.table}`)."
        )
    if after is not None and star:
        return None
    return []


def _widens(transform: Transform, change: AlterColumnType) -> bool:
    """Whether ``change`` only widens a column the transform knows (``INT`` to ``BIGINT``, a longer
    ``VARCHAR``): its expressions and filter mean what they did."""
    from binlake.schema.type_changes import widened

    old = next((c for c in transform.table.columns if c.name == change.column.name), None)
    return old is not None and widened(old, change.column)


def _widened_sink(transform: Transform, after: CreateTable) -> list[SchemaChange]:
    """The sink columns whose type the transform, compiled on ``after``, gives anew (a projected
    column widened with its source, an expression over it): each a type change of the sink table,
    which the sink makes where Iceberg can (a promotion) and refuses otherwise."""
    before = {c.name: c for c in transform.sink.columns}
    now = compile_transform(transform.spec, after).sink.columns
    return [
        AlterColumnType(transform.table.table, c)
        for c in now
        if c.name in before
        and (c.data_type, c.column_type) != (before[c.name].data_type, before[c.name].column_type)
    ]


__all__ = ["Transform", "TransformError", "TransformSpec", "arrow_of", "compile_transform", "sink_column"]
