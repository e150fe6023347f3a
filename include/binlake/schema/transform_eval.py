"""Typed transform expressions (``schema.transform_sql``) evaluated on Arrow columns, whole columns
at a time, with MySQL's results — or a ``TransformInexactError`` where a value falls outside what
binlake reproduces (text outside printable ASCII under a collation, an integer overflow), so the
pipeline stops before writing a row the server would have computed differently."""

from __future__ import annotations

from collections.abc import Callable
from decimal import (
    ROUND_CEILING,
    ROUND_DOWN,
    ROUND_FLOOR,
    ROUND_HALF_UP,
    Decimal,
    localcontext,
)
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from binlake.errors import BinlakeError
from binlake.schema.date_functions import UnrepresentableDateError, date_format, timestamp_add, timestamp_diff
from binlake.schema.mysql_values import WIDE, clamp, quotient, remainder, substring
from binlake.schema.str_to_date import str_to_dates
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
        except UnrepresentableDateError as e:
            raise TransformInexactError(f"{self.where}: `{node.sql}` gives {e}") from None
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

    def _modulo(self, node: Node) -> Datum:
        return self._exact(node, remainder)

    def _int_divide(self, node: Node) -> Datum:
        return self._exact(node, quotient)

    def _exact(self, node: Node, operation: Callable[[Any, Any], Any]) -> Datum:
        """An operation on exact numbers, row by row in Python's integers and decimals (MySQL's
        results, where Arrow has no kernel: truncating, the dividend's sign, NULL for 0)."""
        left, right = (self._python(a) for a in node.args)
        with localcontext(WIDE):
            values = [
                None if a is None or b is None else operation(a, b) for a, b in zip(left, right, strict=True)
            ]
        return self._exact_values(node, values)

    def _rounded(self, node: Node, rounding: str) -> Datum:
        """An exact number rounded to ``node.value`` digits (negative: left of the point)."""
        step = Decimal(1).scaleb(-int(node.value))
        with localcontext(WIDE):
            values: list[Any] = [
                None if v is None else Decimal(v).quantize(step, rounding=rounding)
                for v in self._python(node.args[0])
            ]
        if node.type.kind == "int":
            values = [None if v is None else int(v) for v in values]
        return self._exact_values(node, values)

    def _ceil(self, node: Node) -> Datum:
        return self._rounded(node, ROUND_CEILING)

    def _floor(self, node: Node) -> Datum:
        return self._rounded(node, ROUND_FLOOR)

    def _round(self, node: Node) -> Datum:
        return self._rounded(node, ROUND_HALF_UP)  # half away from zero, as MySQL's exact ROUND

    def _truncate(self, node: Node) -> Datum:
        return self._rounded(node, ROUND_DOWN)

    def _cast(self, node: Node) -> Datum:
        to, values = node.value, self._python(node.args[0])
        if to == "char":  # as the server writes numbers and dates
            text = [
                None if v is None else format(v, "f") if isinstance(v, Decimal) else str(v) for v in values
            ]
            return pa.array(text, pa.string())
        if to == "datetime":
            return pc.cast(self.value(node.args[0]), pa.timestamp("us"))
        step = Decimal(1).scaleb(-node.type.scale)  # SIGNED, UNSIGNED, DECIMAL(p, s): rounded, clamped
        if node.type.kind == "int":
            low, high = Decimal(-(2**63)), Decimal(2**63 - 1)
        else:
            high = Decimal(10) ** (node.type.precision - node.type.scale) - step
            low = -high
        with localcontext(WIDE):
            exact = [
                None if v is None else clamp(Decimal(v).quantize(step, ROUND_HALF_UP), low, high)
                for v in values
            ]
        if node.type.kind == "int":
            return pa.array([None if v is None else int(v) for v in exact], pa.int64())
        return pa.array(exact, arrow_of(node.type))

    def _exact_values(self, node: Node, values: list[Any]) -> Datum:
        """Python integers or decimals as ``node``'s type (refused past BIGINT's range)."""
        if node.type.kind == "int":
            low = 0 if node.type.unsigned else -(2**63)
            if any(v is not None and not low <= v < 2**63 for v in values):
                raise TransformInexactError(
                    f"{self.where}: `{node.sql}` is out of the range of "
                    f"{'BIGINT UNSIGNED' if node.type.unsigned else 'BIGINT'} on a row (a negative result "
                    "of an unsigned operand, or past 2^63 - 1, binlake's integers): the server stops on the "
                    "former too. Fix: CAST the operands to SIGNED, or change the transform."
                )
        elif node.type.kind == "decimal":
            step = Decimal(1).scaleb(-node.type.scale)
            values = [None if v is None else Decimal(v).quantize(step) for v in values]
        return pa.array(values, arrow_of(node.type) if node.type.kind != "int" else pa.int64())

    def _python(self, node: Node) -> list[Any]:
        """``node``'s values as Python numbers (booleans as 0 and 1)."""
        value = self.value(node)
        values = [value.as_py()] * self.rows.num_rows if isinstance(value, pa.Scalar) else value.to_pylist()
        return [int(v) if isinstance(v, bool) else v for v in values]

    def _nullif(self, node: Node) -> Datum:
        common: SqlType = node.value
        left, right = (self._comparable(a, common) for a in node.args)
        same = pc.fill_null(pc.equal(left, right), False)
        value = self.typed(node.args[0], node.type)
        return pc.if_else(same, pa.scalar(None, arrow_of(node.type)), value)

    # -- text -------------------------------------------------------------------------------------

    def _trim(self, node: Node) -> Datum:
        function = {"leading": "utf8_ltrim", "trailing": "utf8_rtrim"}.get(node.value, "utf8_trim")
        return pc.call_function(function, [self.value(node.args[0])], pc.TrimOptions(" "))

    def _substring(self, node: Node) -> Datum:
        return self._text_rows(node, substring)

    def _left(self, node: Node) -> Datum:
        return self._text_rows(node, lambda s, n: s[: max(0, n)])

    def _right(self, node: Node) -> Datum:
        return self._text_rows(node, lambda s, n: s[len(s) - min(len(s), n) :] if n > 0 else "")

    def _text_rows(self, node: Node, function: Callable[..., str]) -> Datum:
        """A function of text and integers, row by row: characters are code points, as MySQL's."""
        columns = [self._python(a) for a in node.args]
        return pa.array(
            [None if None in row else function(*row) for row in zip(*columns, strict=True)], pa.string()
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

    def _date_format(self, node: Node) -> Datum:
        values = self.value(node.args[0])
        times = [values.as_py()] * self.rows.num_rows if isinstance(values, pa.Scalar) else values.to_pylist()
        return pa.array([None if t is None else date_format(t, node.value) for t in times], pa.string())

    def _str_to_date(self, node: Node) -> Datum:
        return pa.array(str_to_dates(self._python(node.args[0]), *node.value), arrow_of(node.type))

    def _timestamp_diff(self, node: Node) -> Datum:
        starts, ends = (self._python(a) for a in node.args)
        return pa.array(
            [
                None if a is None or b is None else timestamp_diff(node.value, a, b)
                for a, b in zip(starts, ends, strict=True)
            ],
            pa.int64(),
        )

    def _timestamp_add(self, node: Node) -> Datum:
        unit, as_date = node.value
        pairs = zip(*(self._python(a) for a in node.args), strict=True)
        values = [None if None in p else timestamp_add(unit, int(p[1]), p[0], as_date) for p in pairs]
        return pa.array(values, arrow_of(node.type))

    def _year(self, node: Node) -> Datum:
        return pc.year(self.value(node.args[0]))

    def _month(self, node: Node) -> Datum:
        return pc.month(self.value(node.args[0]))

    def _day(self, node: Node) -> Datum:
        return pc.day(self.value(node.args[0]))

    def _hour(self, node: Node) -> Datum:
        return pc.hour(self.value(node.args[0]))

    def _minute(self, node: Node) -> Datum:
        return pc.minute(self.value(node.args[0]))

    def _second(self, node: Node) -> Datum:
        return pc.second(self.value(node.args[0]))


def evaluate(node: Node, rows: pa.Table, metadata: dict[str, Any], where: str) -> pa.Array:
    """``node`` over ``rows`` (see ``Evaluator``)."""
    return Evaluator(rows, metadata, where).array(node)
