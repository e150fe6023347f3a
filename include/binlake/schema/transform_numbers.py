"""How numeric SQL expressions of a transform are typed (MySQL's rules, within what binlake
evaluates exactly: ``schema.transform_eval``): arithmetic, division, ``%``/``MOD``/``DIV``, negation,
``ABS``, and ``CEIL``/``FLOOR``/``ROUND``/``TRUNCATE`` of exact numbers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlglot import exp

from binlake.schema.transform_sql import _INT_DIGITS, MAX_PRECISION, Compiler, Node, SqlType, make

#: How one kind of node is typed (the node: that kind of sqlglot expression).
Rule = Callable[[Compiler, Any], Node]


def decimal_of(t: SqlType) -> tuple[int, int]:
    """``t`` as DECIMAL(precision, scale) (integers by their digits)."""
    return (t.precision or _INT_DIGITS, 0) if t.kind in ("int", "bool") else (t.precision, t.scale)


def _arithmetic(c: Compiler, node: Any) -> Node:
    left, right = c.children(node, node.this, node.expression)
    for side in (left, right):
        if not (side.type.numeric or side.type.kind == "null"):
            raise c.refuse(node, f"`{side.sql}` is {side.type.kind}, not a number")
    op = {exp.Add: "add", exp.Sub: "subtract", exp.Mul: "multiply"}[type(node)]
    kinds = {left.type.kind, right.type.kind} - {"null"}
    unsigned = left.type.unsigned or right.type.unsigned
    if "double" in kinds:
        kind = SqlType("double")
    elif "decimal" in kinds:
        (p1, s1), (p2, s2) = decimal_of(left.type), decimal_of(right.type)
        if op == "multiply":
            scale, precision = s1 + s2, p1 + p2
        else:
            scale = max(s1, s2)
            precision = max(p1 - s1, p2 - s2) + scale + 1
        if precision > MAX_PRECISION or scale > 30:
            why = f"its result, DECIMAL({precision},{scale}), is wider than the 38 digits binlake computes"
            raise c.refuse(node, why, "multiply fewer factors, or compute it downstream")
        kind = SqlType("decimal", precision, scale, unsigned)
    else:
        kind = SqlType("int", _INT_DIGITS, 0, unsigned)
    return make(op, kind, (left, right), node)


def _division(c: Compiler, node: exp.Expression) -> Node:
    raise c.refuse(node, "`/` rounds by the server's own rules (div_precision_increment)",
                   "use `DIV` (integer division) or `%`, multiply instead (`amount * 100`), "
                   "or compute it downstream")  # fmt: skip


def _exact_operands(c: Compiler, node: exp.Expression) -> tuple[Node, Node]:
    left, right = c.children(node, node.this, node.expression)
    for side in (left, right):
        if side.type.kind not in ("int", "bool", "decimal", "null"):
            raise c.refuse(node, f"`{side.sql}` is {side.type.kind}: binlake computes `%`, MOD and DIV "
                           "of integers and DECIMALs", "CAST it to DECIMAL")  # fmt: skip
    return left, right


def _modulo(c: Compiler, node: exp.Mod) -> Node:
    """``a % b``, ``MOD(a, b)``: the sign of the dividend, NULL for a zero divisor; DECIMAL at the
    wider scale (MySQL's ``Item_func_mod``)."""
    left, right = _exact_operands(c, node)
    if "decimal" in (left.type.kind, right.type.kind):
        (p1, s1), (p2, s2) = decimal_of(left.type), decimal_of(right.type)
        scale = max(s1, s2)
        kind = SqlType(
            "decimal", min(MAX_PRECISION, max(p1 - s1, p2 - s2) + scale), scale, left.type.unsigned
        )
    else:
        kind = SqlType("int", _INT_DIGITS, 0, left.type.unsigned)
    return make("modulo", kind, (left, right), node)


def _int_divide(c: Compiler, node: exp.IntDiv) -> Node:
    """``a DIV b``: the quotient truncated toward zero, NULL for a zero divisor (``Item_func_int_div``)."""
    left, right = _exact_operands(c, node)
    unsigned = left.type.unsigned or right.type.unsigned
    return make("int_divide", SqlType("int", _INT_DIGITS, 0, unsigned), (left, right), node)


def _negate(c: Compiler, node: exp.Neg) -> Node:
    (arg,) = c.children(node, node.this)
    if not arg.type.numeric:
        raise c.refuse(node, f"`{arg.sql}` is not a number")
    kind = SqlType(arg.type.kind if arg.type.kind != "bool" else "int", arg.type.precision, arg.type.scale)
    return make("negate", kind, (arg,), node)


def _abs(c: Compiler, node: exp.Abs) -> Node:
    (arg,) = c.children(node, node.this)
    if not arg.type.numeric:
        raise c.refuse(node, f"`{arg.sql}` is not a number")
    return make("abs", arg.type if arg.type.kind != "bool" else SqlType("int", 1), (arg,), node)


def _rounding(op: str) -> Rule:
    """``CEIL``/``FLOOR`` (to a whole number), ``ROUND``/``TRUNCATE`` (to a constant number of
    digits, negative: left of the point) of an exact number: MySQL rounds exact values half away
    from zero (``Item_func_round``); a DECIMAL keeps the digits it can still hold."""

    def rule(c: Compiler, node: exp.Expression) -> Node:
        (arg,) = c.children(node, node.this)
        if arg.type.kind == "double":
            raise c.refuse(node, "it rounds a floating-point number", "round an exact (DECIMAL) number")
        if not arg.type.numeric:
            raise c.refuse(node, f"`{arg.sql}` is not a number")
        digits, unsigned = _digits(c, node) if op in ("round", "truncate") else 0, arg.type.unsigned
        if arg.type.kind != "decimal":  # rounding up left of the point may pass BIGINT's range: a DECIMAL
            wider = op == "round" and digits < 0
            kind = (
                SqlType("decimal", _INT_DIGITS + 1, 0, unsigned)
                if wider
                else SqlType("int", _INT_DIGITS, 0, unsigned)
            )
        else:
            precision, scale = decimal_of(arg.type)
            kept = max(0, min(digits, scale))
            kind = SqlType("decimal", min(MAX_PRECISION, precision - scale + kept + 1), kept, unsigned)
        return make(op, kind, (arg,), node, digits)

    return rule


def _digits(c: Compiler, node: exp.Expression) -> int:
    """The constant number of digits of ``ROUND(x, d)``/``TRUNCATE(x, d)`` (``ROUND(x)``: 0)."""
    digits = node.args.get("decimals")
    if digits is None:
        return 0
    negative = isinstance(digits, exp.Neg)
    literal = digits.this if negative else digits
    if not (isinstance(literal, exp.Literal) and not literal.is_string and literal.this.isdigit()):
        raise c.refuse(node, "its number of digits is not a whole-number constant", "round to a constant")
    return -int(literal.this) if negative else int(literal.this)


def _cast(c: Compiler, node: exp.Cast) -> Node:
    """``CAST``/``CONVERT`` between exact types binlake reproduces: numbers to ``SIGNED`` (a DECIMAL
    rounded half away from zero, clamped to BIGINT as the server's warning does) or
    ``DECIMAL(p, s)`` (rounded, clamped to its largest value), an unsigned number to ``UNSIGNED``,
    numbers and dates to ``CHAR``, dates and times to ``DATE`` and ``DATETIME``."""
    (arg,) = c.children(node, node.this)
    to, kind = node.args["to"], arg.type.kind
    target = to.this
    numeric = kind in ("int", "decimal", "bool")
    if target == exp.DataType.Type.BIGINT and numeric:
        return make("cast", SqlType("int", _INT_DIGITS, 0), (arg,), node, "signed")
    if target == exp.DataType.Type.UBIGINT and numeric and arg.type.unsigned:
        return make("cast", SqlType("int", _INT_DIGITS, 0, True), (arg,), node, "signed")
    if target == exp.DataType.Type.DECIMAL and numeric:
        params = [int(p.this.this) for p in to.expressions] or [10]
        precision, scale = params[0], params[1] if len(params) > 1 else 0
        if not 0 < precision <= MAX_PRECISION or scale > precision:
            raise c.refuse(node, f"DECIMAL({precision}, {scale}) is not a DECIMAL binlake writes")
        return make("cast", SqlType("decimal", precision, scale), (arg,), node, "decimal")
    if target == exp.DataType.Type.CHAR and not to.expressions and kind in ("int", "decimal", "date", "text"):
        return make("cast", SqlType("text", length=64), (arg,), node, "char")
    if target == exp.DataType.Type.DATE and kind in ("date", "datetime", "timestamp"):
        return make("date", SqlType("date"), (arg,), node)
    if target == exp.DataType.Type.DATETIME and kind == "date":
        return make("cast", SqlType("datetime"), (arg,), node, "datetime")
    raise c.refuse(node, f"binlake does not reproduce a {kind} cast to {to.sql(dialect='mysql')}")


NUMBER_RULES: dict[type[exp.Expression], Rule] = {
    exp.Add: _arithmetic,
    exp.Sub: _arithmetic,
    exp.Mul: _arithmetic,
    exp.Neg: _negate,
    exp.Div: _division,
    exp.IntDiv: _int_divide,
    exp.Mod: _modulo,
    exp.Abs: _abs,
    exp.Ceil: _rounding("ceil"),
    exp.Floor: _rounding("floor"),
    exp.Round: _rounding("round"),
    exp.Trunc: _rounding("truncate"),
    exp.Cast: _cast,
}
