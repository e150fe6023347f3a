"""Typed transform expressions (``schema.transform_sql``) evaluated on Arrow columns, whole columns
at a time, with MySQL's results — or a ``TransformInexactError`` where a value falls outside what
binlake reproduces (text outside printable ASCII under a collation, an integer overflow), so the
pipeline stops before writing a row the server would have computed differently."""

from __future__ import annotations

from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from binlake.errors import BinlakeError
from binlake.schema.transform_sql import Node, SqlType

#: An Arrow array, chunked array or scalar (pyarrow's compute functions take and give any of them).
Datum: TypeAlias = Any
#: Printable ASCII: text whose comparisons, case mappings and padding binlake reproduces for every
#: collation (others weigh accents, ligatures and ignorable characters by their own tables).
_OUTSIDE_ASCII = r"[^\x20-\x7e]"


_COMPARISONS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "null_safe_equal")
_FAMILIES = {
    **{op: "_arithmetic" for op in ("add", "subtract", "multiply")},
    **{op: "_compare" for op in _COMPARISONS},
}


class TransformInexactError(BinlakeError):
    """A value the transform cannot evaluate exactly (the message says which and how to fix it)."""


def arrow_of(t: SqlType) -> pa.DataType:
    """The Arrow type a value of ``t`` is computed in."""
    return {
        "int": pa.int64(), "double": pa.float64(), "text": pa.string(), "binary": pa.binary(),
        "date": pa.date32(), "datetime": pa.timestamp("us"), "timestamp": pa.timestamp("us", "UTC"),
        "bool": pa.bool_(), "null": pa.null(),
    }.get(t.kind) or pa.decimal128(max(1, t.precision), t.scale)  # fmt: skip


class Evaluator:
    """Evaluates nodes over ``rows`` (the source's columns) and ``metadata`` (arrays by name)."""

    def __init__(self, rows: pa.Table, metadata: dict[str, pa.Array], where: str) -> None:
        self.rows = rows
        self.metadata = metadata
        self.where = where

    def array(self, node: Node) -> pa.Array:
        """``node``'s value for every row, as an array of ``arrow_of(node.type)``."""
        value = self.value(node)
        if isinstance(value, pa.Scalar):
            value = pa.array([value.as_py()] * self.rows.num_rows, value.type)
        if isinstance(value, pa.ChunkedArray):
            value = value.combine_chunks()
        return value.cast(arrow_of(node.type)) if node.type.kind != "null" else value

    def value(self, node: Node) -> Datum:
        family = _FAMILIES.get(node.op)  # operators one method evaluates by Arrow's function name
        handler = getattr(self, family or f"_{node.op}", None)
        if handler is None:  # the compiler never makes one: a defect, not a user's mistake
            raise AssertionError(f"no evaluation for {node.op}")
        try:
            result: Datum = handler(node, node.op) if family else handler(node)
        except pa.ArrowInvalid as e:
            raise TransformInexactError(
                f"{self.where}: `{node.sql}` failed on a row ({str(e).splitlines()[0]}); the server stops "
                "such a statement too (an overflow). Fix: change the transform so every row fits."
            ) from None
        return result

    def typed(self, node: Node, t: SqlType) -> Datum:
        """``node``'s value as ``t`` (numbers widened, text literals read as dates…)."""
        value = self.value(node)
        if node.type.kind == "null":
            return pa.scalar(None, arrow_of(t))
        if t.kind == "text" or t.kind == node.type.kind == "binary":
            return value
        if t.kind == "decimal" and node.type.kind in ("int", "bool"):
            # Arrow casts integers only into DECIMALs with room for any int64 (19 digits).
            value = pc.cast(pc.cast(value, pa.int64()), pa.decimal128(min(38, 20 + t.scale), t.scale))
        return pc.cast(value, arrow_of(t))

    # -- leaves -----------------------------------------------------------------------------------

    def _column(self, node: Node) -> Datum:
        column = self.rows.column(node.value)
        return column if node.type.kind != "bool" else pc.cast(column, pa.bool_())

    def _metadata(self, node: Node) -> Datum:
        return self.metadata[node.value]

    def _literal(self, node: Node) -> Datum:
        return pa.scalar(node.value, arrow_of(node.type))

    # -- numbers ----------------------------------------------------------------------------------

    def _arithmetic(self, node: Node, function: str) -> Datum:
        left, right = (self._number(a, node.type) for a in node.args)
        result = pc.call_function(
            f"{function}_checked" if node.type.kind != "double" else function, [left, right]
        )
        if node.type.unsigned and node.type.kind != "double":
            self._not_negative(node, result)
        return pc.cast(result, arrow_of(node.type))

    def _negate(self, node: Node) -> Datum:
        return pc.negate_checked(self._number(node.args[0], node.type))

    def _abs(self, node: Node) -> Datum:
        return pc.abs_checked(self._number(node.args[0], node.type))

    def _number(self, node: Node, t: SqlType) -> Datum:
        if t.kind == "decimal":  # each side at its own scale: Arrow's decimal rules are MySQL's
            # Arrow casts integers only into DECIMALs wide enough for any int64 (19 digits).
            own = node.type if node.type.kind == "decimal" else SqlType("decimal", 20, 0)
            return (
                pc.cast(self.value(node), arrow_of(own)) if node.type.kind != "null" else self.typed(node, t)
            )
        return self.typed(node, t)

    def _not_negative(self, node: Node, result: Datum) -> None:
        if pc.any(pc.less(result, pa.scalar(0, result.type))).as_py():
            raise TransformInexactError(
                f"{self.where}: `{node.sql}` is negative on a row, but an unsigned operand makes it "
                "unsigned: the server stops with 'BIGINT UNSIGNED value is out of range'. Fix: CAST the "
                "operands to SIGNED in the source, or change the transform."
            )

    # -- comparisons ------------------------------------------------------------------------------

    def _compare(self, node: Node, function: str) -> Datum:
        common: SqlType = node.value
        left, right = (self._comparable(a, common) for a in node.args)
        if function == "null_safe_equal":
            both = pc.and_(pc.is_null(left), pc.is_null(right))
            return pc.if_else(both, True, pc.fill_null(pc.equal(left, right), False))
        return pc.call_function(function, [left, right])

    def _comparable(self, node: Node, common: SqlType) -> Datum:
        value = self.typed(node, common)
        if common.kind != "text":
            return value
        self._ascii(node, value)
        collation = (common.collation or "").lower()
        if collation and not (collation.endswith("_bin") or collation == "binary"):
            value = pc.utf8_lower(value)  # _ci: case does not count
        if "nopad" not in collation and "0900" not in collation:
            value = pc.utf8_rtrim(value, characters=" ")  # PAD SPACE: trailing spaces do not count
        return value

    def _ascii(self, node: Node, value: Datum) -> None:
        if pc.any(pc.match_substring_regex(value, _OUTSIDE_ASCII)).as_py():
            raise TransformInexactError(
                f"{self.where}: `{node.sql}` holds text outside printable ASCII, which the column's "
                "collation compares (or changes case) by tables binlake does not reproduce. Fix: leave "
                "the comparison (or UPPER/LOWER) of this column out of the transform, or compare a column "
                "of ASCII codes."
            )

    def _in(self, node: Node) -> Datum:
        common: SqlType = node.value
        left = self._comparable(node.args[0], common)
        found: Datum = pa.scalar(False)
        for value in node.args[1:]:  # `x IN (a, NULL)` is NULL when x is not a: or_kleene's rule
            found = pc.or_kleene(found, pc.equal(left, self._comparable(value, common)))
        return found

    # -- logic ------------------------------------------------------------------------------------

    def _truth(self, node: Node) -> Datum:
        value = self.value(node)
        if node.type.kind == "bool":
            return value
        if node.type.kind == "null":
            return pa.scalar(None, pa.bool_())
        return pc.not_equal(value, pa.scalar(0, value.type))  # MySQL: a number is true unless 0

    def _and(self, node: Node) -> Datum:
        return pc.and_kleene(*(self._truth(a) for a in node.args))

    def _or(self, node: Node) -> Datum:
        return pc.or_kleene(*(self._truth(a) for a in node.args))

    def _xor(self, node: Node) -> Datum:
        return pc.xor(*(self._truth(a) for a in node.args))

    def _not(self, node: Node) -> Datum:
        return pc.invert(self._truth(node.args[0]))

    def _is_null(self, node: Node) -> Datum:
        return pc.is_null(self.value(node.args[0]))

    # -- functions --------------------------------------------------------------------------------

    def _coalesce(self, node: Node) -> Datum:
        return pc.coalesce(*(self.typed(a, node.type) for a in node.args))

    def _case(self, node: Node) -> Datum:
        *branches, otherwise = node.args
        result = self.typed(otherwise, node.type)
        for condition, value in reversed(list(zip(branches[0::2], branches[1::2], strict=True))):
            chosen = pc.fill_null(self._truth(condition), False)  # NULL is not TRUE
            result = pc.if_else(chosen, self.typed(value, node.type), result)
        return result

    def _upper(self, node: Node) -> Datum:
        value = self.value(node.args[0])
        self._ascii(node, value)
        return pc.ascii_upper(value)

    def _lower(self, node: Node) -> Datum:
        value = self.value(node.args[0])
        self._ascii(node, value)
        return pc.ascii_lower(value)

    def _concat(self, node: Node) -> Datum:
        parts = [self.typed(a, SqlType("text")) for a in node.args]
        return pc.binary_join_element_wise(*parts, "", null_handling="emit_null")

    def _char_length(self, node: Node) -> Datum:
        return pc.utf8_length(self.value(node.args[0]))

    def _date(self, node: Node) -> Datum:
        return pc.cast(self.value(node.args[0]), pa.date32())

    def _year(self, node: Node) -> Datum:
        return pc.year(self.value(node.args[0]))

    def _month(self, node: Node) -> Datum:
        return pc.month(self.value(node.args[0]))

    def _day(self, node: Node) -> Datum:
        return pc.day(self.value(node.args[0]))


def evaluate(node: Node, rows: pa.Table, metadata: dict[str, Any], where: str) -> pa.Array:
    """``node`` over ``rows`` (see ``Evaluator``)."""
    return Evaluator(rows, metadata, where).array(node)
