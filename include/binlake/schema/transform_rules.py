"""How each kind of SQL expression a transform may hold is typed (MySQL's rules; see
``schema.transform_sql``): one function per sqlglot node kind, in ``RULES``."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from sqlglot import exp

from binlake.schema.date_functions import DATE_UNITS, UNITS, refused_specifiers
from binlake.schema.str_to_date import refused_specifiers as str_to_date_refused
from binlake.schema.str_to_date import result_kind
from binlake.schema.transform_numbers import NUMBER_RULES, Rule, decimal_of
from binlake.schema.transform_sql import _INT_DIGITS, MAX_PRECISION, NULL, Compiler, Node, SqlType, make

BOOL = SqlType("bool")


def _literal(c: Compiler, node: exp.Literal) -> Node:
    text = str(node.this)
    if node.is_string:
        return make("literal", SqlType("text", length=len(text)), (), node, text)
    if "e" in text.lower():
        return make("literal", SqlType("double"), (), node, float(text))
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise c.refuse(node, "it is not a number binlake reads") from None
    digits, scale = len(number.as_tuple().digits), max(0, -int(number.as_tuple().exponent))
    if scale == 0:
        return make("literal", SqlType("int", max(1, digits), 0, number > 2**63 - 1), (), node, int(number))
    return make("literal", SqlType("decimal", max(digits, scale), scale), (), node, number)


def _null(c: Compiler, node: exp.Expression) -> Node:
    return make("literal", NULL, (), node, None)


def _boolean(c: Compiler, node: exp.Boolean) -> Node:
    return make("literal", SqlType("int", 1), (), node, 1 if node.this else 0)


def comparable(c: Compiler, node: exp.Expression, left: Node, right: Node) -> SqlType:
    """The type two sides are compared as (MySQL's rules, within what binlake evaluates exactly)."""
    a, b = left.type, right.type
    if a.kind == "null" or b.kind == "null":
        return b if a.kind == "null" else a
    if a.numeric and b.numeric:
        if "double" in (a.kind, b.kind):
            return SqlType("double")
        if "decimal" in (a.kind, b.kind):
            (p1, s1), (p2, s2) = decimal_of(a), decimal_of(b)
            scale = max(s1, s2)
            return SqlType("decimal", min(MAX_PRECISION, max(p1 - s1, p2 - s2) + scale), scale)
        return SqlType("int", _INT_DIGITS)
    if a.kind == b.kind and a.kind in ("date", "datetime", "timestamp", "binary"):
        return a
    temporal = a if a.temporal else b if b.temporal else None
    other = b if temporal is a else a
    if temporal is not None and other.kind == "text" and (left.op == "literal" or right.op == "literal"):
        return temporal  # the literal is read as the column's type, as MySQL does
    if a.kind == "text" and b.kind == "text":
        collations = {t.collation for t in (a, b) if t.collation is not None}
        if len(collations) > 1:
            raise c.refuse(node, f"it compares text of two collations ({', '.join(sorted(collations))})",
                           "compare columns of one collation")  # fmt: skip
        return SqlType("text", collation=next(iter(collations), None))
    raise c.refuse(node, f"it compares {a.kind} with {b.kind}", "compare values of one kind")


def _compare(c: Compiler, node: Any) -> Node:
    left, right = c.children(node, node.this, node.expression)
    op = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.GT: "greater", exp.GTE: "greater_equal",
          exp.LT: "less", exp.LTE: "less_equal", exp.NullSafeEQ: "null_safe_equal"}[type(node)]  # fmt: skip
    common = comparable(c, node, left, right)
    if common.kind == "text" and op not in ("equal", "not_equal", "null_safe_equal"):
        raise c.refuse(node, "text is ordered by its collation, which binlake does not reproduce",
                       "compare text with = or <>, or compare another column")  # fmt: skip
    return make(op, BOOL, (left, right), node, common)


def _in(c: Compiler, node: exp.In) -> Node:
    if node.args.get("query") or node.args.get("unnest"):
        raise c.refuse(node, "a transform sees one row at a time", "list the values")
    left = c.children(node, node.this)[0]
    values = c.children(node, *node.expressions)
    common = left.type
    for value in values:  # one type for the left side and every value, as a chain of comparisons
        common = comparable(c, node, Node(left.op, common), value)
    return make("in", BOOL, (left, *values), node, common)


def _between(c: Compiler, node: exp.Between) -> Node:
    left, low, high = c.children(node, node.this, node.args["low"], node.args["high"])
    lower = make("greater_equal", BOOL, (left, low), node, comparable(c, node, left, low))
    upper = make("less_equal", BOOL, (left, high), node, comparable(c, node, left, high))
    for side in (lower, upper):
        if side.value.kind == "text":
            raise c.refuse(node, "text is ordered by its collation, which binlake does not reproduce")
    return make("and", BOOL, (lower, upper), node)


def _truth(c: Compiler, node: exp.Expression, arg: Node) -> Node:
    if not (arg.type.numeric or arg.type.kind == "null"):
        raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not a condition", "compare it with a value")
    return arg


def _logic(c: Compiler, node: exp.Expression) -> Node:
    if isinstance(node, exp.Not):
        return make("not", BOOL, (_truth(c, node, c.children(node, node.this)[0]),), node)
    ops: dict[type[exp.Expression], str] = {exp.And: "and", exp.Or: "or", exp.Xor: "xor"}
    op = ops[type(node)]
    left, right = (_truth(c, node, a) for a in c.children(node, node.this, node.expression))
    return make(op, BOOL, (left, right), node)


def _is(c: Compiler, node: exp.Is) -> Node:
    if not isinstance(node.expression, exp.Null):
        raise c.refuse(node, "only IS NULL and IS NOT NULL are evaluated", "compare with = instead")
    return make("is_null", BOOL, c.children(node, node.this), node)


def common_type(c: Compiler, node: exp.Expression, args: tuple[Node, ...]) -> SqlType:
    """The type of a value that is one of ``args`` (COALESCE, IF, CASE)."""
    typed = [a.type for a in args if a.type.kind != "null"]
    if not typed:
        return NULL
    kinds = {t.kind for t in typed}
    if kinds <= {"int", "bool", "decimal", "double"}:
        if "double" in kinds:
            return SqlType("double")
        if "decimal" in kinds:
            scale = max(decimal_of(t)[1] for t in typed)
            digits = max(decimal_of(t)[0] - decimal_of(t)[1] for t in typed)
            return SqlType("decimal", min(MAX_PRECISION, digits + scale), scale)
        return SqlType("int", _INT_DIGITS, 0, all(t.unsigned for t in typed))
    if len(kinds) == 1 and "text" in kinds:
        collations = _result_collation(c, node, {t.collation for t in typed if t.collation is not None})
        lengths = [t.length for t in typed]
        length = None if None in lengths else max(t or 0 for t in lengths)
        return SqlType("text", collation=next(iter(collations), None), length=length)
    if len(kinds) == 1:
        return typed[0]
    raise c.refuse(
        node, f"its values are of different kinds ({', '.join(sorted(kinds))})", "CAST them to one"
    )


def _coalesce(c: Compiler, node: exp.Coalesce) -> Node:
    args = c.children(node, node.this, *node.expressions)
    return make("coalesce", common_type(c, node, args), args, node)


def _if(c: Compiler, node: exp.If) -> Node:
    condition = _truth(c, node, c.children(node, node.this)[0])
    values = c.children(node, node.args["true"], node.args.get("false") or exp.Null())
    return make("case", common_type(c, node, values), (condition, *values), node)


def _case(c: Compiler, node: exp.Case) -> Node:
    if node.this is not None:
        raise c.refuse(node, "the `CASE x WHEN v` form is not evaluated", "write `CASE WHEN x = v THEN …`")
    parts: list[Node] = []
    for branch in node.args["ifs"]:
        condition = _truth(c, branch, c.children(branch, branch.this)[0])
        parts += [condition, c.children(branch, branch.args["true"])[0]]
    otherwise = c.children(node, node.args.get("default") or exp.Null())[0]
    values = (*parts[1::2], otherwise)
    return make("case", common_type(c, node, values), (*parts, otherwise), node)


def _text_function(op: str) -> Rule:
    def rule(c: Compiler, node: Any) -> Node:
        (arg,) = c.children(node, node.this)
        if arg.type.kind not in ("text", "null"):
            raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not text")
        return make(op, arg.type, (arg,), node)

    return rule


def _result_collation(c: Compiler, node: exp.Expression, collations: set[str | None]) -> set[str | None]:
    """The collation of a value made of text of ``collations`` (MySQL: of one character set, the
    ``_bin`` one wins)."""
    if len(collations) <= 1:
        return collations
    binary = {x for x in collations if x is not None and x.endswith("_bin")}
    if len(binary) != 1 or len({x.split("_")[0] for x in collations if x is not None}) != 1:
        raise c.refuse(node, f"its text is of collations {', '.join(sorted(str(x) for x in collations))}",
                       "use columns of one collation")  # fmt: skip
    return set(binary)


def _concat(c: Compiler, node: exp.Concat) -> Node:
    args = c.children(node, *node.expressions)
    for arg in args:
        if arg.type.kind not in ("text", "null"):
            raise c.refuse(
                node, f"`{arg.sql}` is {arg.type.kind}, not text", "CONCAT text columns and literals"
            )
    collations = _result_collation(c, node, {a.type.collation for a in args if a.type.collation is not None})
    lengths = [a.type.length for a in args]
    length = None if None in lengths else sum(x or 0 for x in lengths)
    return make("concat", SqlType("text", collation=next(iter(collations), None), length=length), args, node)


def _length(c: Compiler, node: exp.Length) -> Node:
    if node.args.get("binary"):
        raise c.refuse(node, "LENGTH counts bytes in the column's character set", "use CHAR_LENGTH")
    (arg,) = c.children(node, node.this)
    if arg.type.kind not in ("text", "null"):
        raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not text")
    return make("char_length", SqlType("int", _INT_DIGITS, 0, True), (arg,), node)


def _nullif(c: Compiler, node: exp.Nullif) -> Node:
    left, right = c.children(node, node.this, node.expression)
    common = comparable(c, node, left, right)
    if common.kind == "double":
        raise c.refuse(node, "it compares floating-point numbers", "compare exact numbers")
    return make("nullif", left.type, (left, right), node, common)


def _trim(c: Compiler, node: exp.Trim) -> Node:
    chars = node.args.get("expression")
    if chars is not None and not (isinstance(chars, exp.Literal) and chars.this == " "):
        raise c.refuse(node, "only spaces are trimmed by binlake", "trim spaces, or compute it downstream")
    (arg,) = c.children(node, node.this)
    if arg.type.kind not in ("text", "null"):
        raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not text")
    side = str(node.args.get("position") or "both").lower()
    return make("trim", arg.type, (arg,), node, side)


def _integers(c: Compiler, node: exp.Expression, args: tuple[Node, ...]) -> None:
    for arg in args:
        if arg.type.kind not in ("int", "bool", "null"):
            raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not an integer (the server rounds it)")


def _substring(c: Compiler, node: exp.Substring) -> Node:
    """``SUBSTRING(s, pos[, len])`` in characters: pos 1-based, negative from the end, 0 → ''."""
    text, *numbers = c.children(node, node.this, node.args["start"], *filter(None, [node.args.get("length")]))
    if text.type.kind not in ("text", "null"):
        raise c.refuse(node, f"`{text.sql}` is {text.type.kind}, not text")
    _integers(c, node, tuple(numbers))
    return make("substring", text.type, (text, *numbers), node)


def _left_right(c: Compiler, node: exp.Left | exp.Right) -> Node:
    text, count = c.children(node, node.this, node.expression)
    if text.type.kind not in ("text", "null"):
        raise c.refuse(node, f"`{text.sql}` is {text.type.kind}, not text")
    _integers(c, node, (count,))
    return make("left" if isinstance(node, exp.Left) else "right", text.type, (text, count), node)


def _clock_part(op: str) -> Rule:
    def rule(c: Compiler, node: Any) -> Node:
        (arg,) = c.children(node, node.this)
        if arg.type.kind not in ("datetime", "timestamp"):
            raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not a DATETIME or TIMESTAMP")
        return make(op, SqlType("int", 2, 0, True), (arg,), node)

    return rule


def _date(c: Compiler, node: exp.Expression) -> Node:
    (arg,) = c.children(node, node.this)
    if not arg.type.temporal:
        raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not a date or time")
    return make("date", SqlType("date"), (arg,), node)


def _part(op: str) -> Rule:
    def rule(c: Compiler, node: Any) -> Node:
        inner = node.this.this if isinstance(node.this, exp.TsOrDsToDate) else node.this
        (arg,) = c.children(node, inner)
        if not arg.type.temporal:
            raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not a date or time")
        return make(op, SqlType("int", 4, 0, True), (arg,), node)

    return rule


def _date_format(c: Compiler, node: exp.TimeToStr) -> Node:
    """``DATE_FORMAT(x, 'constant')`` of a DATE, DATETIME or TIMESTAMP (``schema.date_functions``)."""
    inner = node.this.this if isinstance(node.this, exp.TsOrDsToTimestamp) else node.this
    (arg,) = c.children(node, inner)
    if arg.type.kind not in ("date", "datetime", "timestamp"):
        raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not a DATE, DATETIME or TIMESTAMP")
    fmt = _constant_format(c, node, exp.TimeToStr)
    refused = refused_specifiers(fmt)
    if refused:
        raise c.refuse(node, f"week numbers ({', '.join(refused)}) follow MySQL's own week rules")
    return make("date_format", SqlType("text", length=64), (arg,), node, fmt)


def _constant_format(c: Compiler, node: exp.Expression, kind: type[exp.Expression]) -> str:
    """A date function's format, which must be a constant, in the server's notation."""
    if not isinstance(node.args["format"], exp.Literal):
        raise c.refuse(node, "its format is not a constant", "format with a constant string")
    # sqlglot keeps the format in its own notation: the server's, as MySQL's SQL writes it back
    written = kind(this=exp.column("x"), format=node.args["format"]).sql(dialect="mysql")
    return written[written.index("'") + 1 : written.rindex("'")].replace("''", "'")


def _str_to_date(c: Compiler, node: exp.Expression) -> Node:
    """``STR_TO_DATE(text, 'constant')`` giving a DATE or a DATETIME (``schema.str_to_date``)."""
    (arg,) = c.children(node, node.this)
    if arg.type.kind not in ("text", "null"):
        raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not text")
    fmt = _constant_format(c, node, exp.StrToDate)
    refused = str_to_date_refused(fmt)
    if refused:
        raise c.refuse(node, f"binlake does not read {', '.join(refused)} as the server does")
    kind = result_kind(fmt)
    if kind == "time":
        raise c.refuse(node, "its format has no date part: the server's result is a TIME")
    result = {"date": SqlType("date"), "datetime": SqlType("datetime", 19, 0)}.get(kind)
    return make("str_to_date", result or SqlType("datetime", 26, 6), (arg,), node, (fmt, kind))


def _timestamp_diff(c: Compiler, node: exp.TimestampDiff) -> Node:
    """``TIMESTAMPDIFF(unit, start, end)`` of DATEs, DATETIMEs and TIMESTAMPs (``schema.date_functions``)."""
    end, start = c.children(node, node.this, node.expression)
    for arg in (start, end):
        if arg.type.kind not in ("date", "datetime", "timestamp", "null"):
            raise c.refuse(node, f"`{arg.sql}` is {arg.type.kind}, not a DATE, DATETIME or TIMESTAMP")
    unit = str(node.args["unit"].this).upper() if node.args.get("unit") is not None else ""
    if unit not in UNITS:
        raise c.refuse(node, f"its unit `{unit}` is not one binlake counts in")
    return make("timestamp_diff", SqlType("int", _INT_DIGITS, 0), (start, end), node, unit)


def _timestamp_add(c: Compiler, node: exp.Expression) -> Node:
    """``TIMESTAMPADD(unit, n, t)``, ``DATE_ADD(t, INTERVAL n unit)``, ``DATE_SUB`` with a whole
    number of units (``schema.date_functions``): a DATE stays a DATE by whole days, else a DATETIME."""
    amount = node.expression
    if isinstance(amount, exp.Literal) and amount.is_string and amount.this.lstrip("-").isdigit():
        amount = exp.Literal.number(amount.this)  # sqlglot reads INTERVAL 1 DAY's 1 as text
    if isinstance(node, exp.DateSub):
        amount = exp.Neg(this=amount)
    moment, count = c.children(node, node.this, amount)
    if moment.type.kind not in ("date", "datetime", "timestamp"):
        raise c.refuse(node, f"`{moment.sql}` is {moment.type.kind}, not a DATE, DATETIME or TIMESTAMP")
    if count.type.kind not in ("int", "bool"):
        raise c.refuse(node, f"`{count.sql}` is not a whole number of units")
    unit = str(node.args["unit"].this).upper() if node.args.get("unit") is not None else "DAY"
    if unit not in UNITS:
        raise c.refuse(node, f"its unit `{unit}` is not one binlake adds")
    as_date = moment.type.kind == "date" and unit in DATE_UNITS
    kind = SqlType("date") if as_date else SqlType("datetime", 26, 6)
    return make("timestamp_add", kind, (moment, count), node, (unit, as_date))


RULES: dict[type[exp.Expression], Rule] = {
    **NUMBER_RULES,
    exp.Column: lambda c, n: c.reference(n),
    exp.Literal: _literal,
    exp.Null: _null,
    exp.Boolean: _boolean,
    exp.Nullif: _nullif,
    exp.Trim: _trim,
    exp.Substring: _substring,
    exp.Left: _left_right,
    exp.Right: _left_right,
    exp.Hour: _clock_part("hour"),
    exp.Minute: _clock_part("minute"),
    exp.Second: _clock_part("second"),
    **{k: _compare for k in (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ)},
    exp.In: _in,
    exp.Between: _between,
    exp.And: _logic,
    exp.Or: _logic,
    exp.Xor: _logic,
    exp.Not: _logic,
    exp.Is: _is,
    exp.Coalesce: _coalesce,
    exp.If: _if,
    exp.Case: _case,
    exp.Upper: _text_function("upper"),
    exp.Lower: _text_function("lower"),
    exp.Concat: _concat,
    exp.Length: _length,
    exp.TsOrDsToDate: _date,
    exp.TimeToStr: _date_format,
    exp.StrToDate: _str_to_date,
    exp.StrToTime: _str_to_date,
    exp.TimestampDiff: _timestamp_diff,
    exp.TimestampAdd: _timestamp_add,
    exp.DateAdd: _timestamp_add,
    exp.DateSub: _timestamp_add,
    exp.Year: _part("year"),
    exp.Month: _part("month"),
    exp.Day: _part("day"),
}
