"""A transform's SQL (MySQL syntax, parsed with sqlglot) as typed expressions binlake evaluates
exactly as the server would — or refuses before anything runs.

Only what binlake reproduces value for value on Arrow (``schema.transform_eval``) is accepted; each
refusal names the expression and says how to write it instead. The rules follow MySQL's:

- **Numbers**: integers add, subtract and multiply as BIGINT (an overflow stops, as the server's
  "BIGINT value is out of range" does; a result involving an unsigned operand is unsigned, and a
  negative one stops likewise); DECIMAL keeps MySQL's precision and scale (``+``/``-``: the larger
  scale, ``*``: the sum of scales; integers count as DECIMAL(20,0), integer literals by their
  digits); FLOAT/DOUBLE compute in double. ``/``, ``DIV`` and ``%`` are refused (their rounding and
  zero rules are the server's own), as are precisions above 38 digits.
- **Comparisons** of numbers (mixed: as DECIMAL, or as double when one side is a float), of
  dates and times (a string literal is read as the column's type), and of text for equality
  (``=``, ``<>``, ``IN``): by the column's collation — ``_bin``/``binary`` byte for byte, ``_ci``
  collations without case, trailing spaces ignored unless the collation is NO PAD. Text values
  outside printable ASCII, where collations differ from any rule binlake could apply, stop the
  pipeline with the table and the value's column (``TransformInexactError``). Ordering text
  (``<``, ``>``), ``LIKE`` and comparisons of text with numbers are refused.
- **Logic** is SQL's three-valued logic; a filter keeps the rows where it is TRUE.
- **Functions**: ``COALESCE``, ``IFNULL``, ``IF``, ``CASE``, ``UPPER``, ``LOWER`` (ASCII text; other
  values stop), ``CONCAT`` (text; NULL if any argument is), ``CHAR_LENGTH``, ``ABS``, ``DATE``,
  ``YEAR``, ``MONTH``, ``DAY``. Non-deterministic functions (``NOW()``, ``RAND()``, ``UUID()``…),
  aggregates, window functions and subqueries are refused: a transform is a function of one row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from binlake.errors import BinlakeError
from binlake.events import Column, CreateTable
from binlake.schema.type_mapping import is_bool

MAX_PRECISION = 38
_INT_DIGITS = 20  # BIGINT's digits as a DECIMAL (MySQL counts an unsigned one as 20)
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_NONDETERMINISTIC = {
    "NOW", "SYSDATE", "CURDATE", "CURTIME", "UTC_TIMESTAMP", "UTC_DATE", "UTC_TIME", "RAND", "UUID",
    "UUID_SHORT", "CONNECTION_ID", "USER", "CURRENT_USER", "SESSION_USER", "SYSTEM_USER",
    "LAST_INSERT_ID", "ROW_COUNT", "FOUND_ROWS", "SLEEP", "BENCHMARK", "UNIX_TIMESTAMP",
    "LOCALTIME", "LOCALTIMESTAMP", "DATABASE", "SCHEMA", "VERSION",
}  # fmt: skip
_NONDETERMINISTIC_NODES = (
    exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.Rand, exp.Uuid, exp.CurrentUser,
)  # fmt: skip


class TransformError(BinlakeError):
    """A transform's expression binlake cannot evaluate exactly (or that is wrong)."""


@dataclass(frozen=True)
class SqlType:
    """An expression's MySQL type, as far as evaluating it needs."""

    kind: str
    """``int``, ``decimal``, ``double``, ``text``, ``binary``, ``date``, ``datetime``,
    ``timestamp``, ``bool``, or ``null`` (the NULL literal)."""
    precision: int = 0
    scale: int = 0
    unsigned: bool = False
    collation: str | None = None
    length: int | None = None

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "decimal", "double", "bool")

    @property
    def temporal(self) -> bool:
        return self.kind in ("date", "datetime", "timestamp")


NULL = SqlType("null")


@dataclass(frozen=True)
class Node:
    """A typed expression: ``op`` names what ``schema.transform_eval`` does with ``args``."""

    op: str
    type: SqlType
    args: tuple[Node, ...] = ()
    value: Any = None
    """The column's name (``column``), the literal (``literal``), or an operator's detail."""
    sql: str = ""
    columns: frozenset[str] = field(default_factory=frozenset)
    """Source columns the expression reads."""
    uses_metadata: bool = False
    """Whether it reads a metadata column."""


def column_type(column: Column) -> SqlType | None:
    """``column``'s type in expressions (None: binlake does not evaluate expressions over it; a
    projection may still carry it through)."""
    t = column.data_type
    if is_bool(column):
        return SqlType("bool")
    if column.is_integral or t == "year":
        return SqlType("int", _INT_DIGITS, 0, column.unsigned)
    if t == "decimal" and (column.precision or 0) <= MAX_PRECISION:
        return SqlType("decimal", column.precision or 10, column.scale or 0, column.unsigned)
    if t in ("float", "double"):
        return SqlType("double")
    if t in _TEXT:
        return SqlType("text", collation=column.collation, length=column.length)
    if t in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        return SqlType("binary", length=column.length)
    if t in ("date", "datetime", "timestamp"):
        return SqlType(t)
    return None


def parse_projection(text: str, where: str) -> list[exp.Expression]:
    """The items of a projection (``a, UPPER(b) AS c, *``)."""
    return list(_select(text, None, where).expressions)


def parse_filter(text: str, where: str) -> exp.Expression:
    condition = _select("1", text, where).args.get("where")
    assert condition is not None
    return condition.this  # type: ignore[no-any-return]


def filter_sql(text: str, where: str) -> str:
    """The filter as the server is sent it (verify, reconcile): MySQL SQL rendered from the very
    parse the stream evaluates, so both read it alike. The text itself is never sent: the server
    runs what sqlglot reads as a comment (``v > 0 /*! OR 1=1 */`` would keep every row there)."""
    return str(parse_filter(text, where).sql(dialect="mysql", comments=False))


def _select(projection: str, condition: str | None, where: str) -> exp.Select:
    sql = f"SELECT {projection} FROM t" + (f" WHERE {condition}" if condition is not None else "")
    try:
        parsed = sqlglot.parse_one(sql, read="mysql")
    except sqlglot.errors.ParseError as e:
        text = projection if condition is None else condition
        raise TransformError(
            f"{where}: cannot parse {text!r} as MySQL SQL ({str(e).splitlines()[0]}). Fix: write it as a "
            "MySQL expression."
        ) from None
    if not isinstance(parsed, exp.Select) or parsed.args.get("joins") or parsed.args.get("group"):
        raise TransformError(f"{where}: expected expressions over one row, got {sql!r}.")
    return parsed


class Compiler:
    """Types the expressions of one source table's transform (``where``: for messages)."""

    def __init__(
        self,
        table: CreateTable,
        metadata: dict[str, SqlType],
        where: str,
        rules: Mapping[type[exp.Expression], Callable[[Compiler, Any], Node]],
    ) -> None:
        self.columns = {c.name.lower(): c for c in table.columns}
        self.metadata = metadata
        self.where = where
        self.rules = rules
        """How each kind of node is typed (``schema.transform_rules.RULES``)."""

    def compile(self, node: exp.Expression) -> Node:
        try:
            return self._node(node)
        except TransformError:
            raise
        except (KeyError, ValueError, TypeError) as e:  # an argument binlake did not expect
            raise self.refuse(node, f"it is not understood ({e})") from None

    def refuse(self, node: exp.Expression, why: str, fix: str | None = None) -> TransformError:
        return TransformError(
            f"{self.where}: cannot evaluate `{node.sql(dialect='mysql')}`: {why}. "
            f"Fix: {fix or 'write it with the columns, operators and functions binlake evaluates (listed in binlake.schema.transform_sql), or leave it out'}."  # noqa: E501
        )

    def _node(self, node: exp.Expression) -> Node:
        if isinstance(node, exp.Paren):
            return self._node(node.this)
        if isinstance(node, _NONDETERMINISTIC_NODES) or (
            isinstance(node, exp.Anonymous) and str(node.this).upper() in _NONDETERMINISTIC
        ):
            raise self.refuse(
                node, "it is not deterministic (its value depends on when or where it runs, so a row "
                "would differ between the snapshot, the stream and a backfill)", "leave it out",
            )  # fmt: skip
        if isinstance(node, exp.AggFunc | exp.Window | exp.Subquery | exp.Select):
            raise self.refuse(node, "a transform sees one row at a time", "leave it out")
        rule = self.rules.get(type(node))
        if rule is None:
            raise self.refuse(node, "binlake does not evaluate it")
        typed: Node = rule(self, node)
        return typed

    def reference(self, node: exp.Column) -> Node:
        name = node.name
        if name.lower() in self.metadata:
            return Node(
                "metadata", self.metadata[name.lower()], value=name.lower(), sql=name, uses_metadata=True
            )
        column = self.columns.get(name.lower())
        if column is None:
            known = ", ".join(sorted(self.columns))
            raise TransformError(
                f"{self.where}: `{name}` is not a column of the table (its columns: {known}; metadata: "
                f"{', '.join(sorted(self.metadata))}). Fix: name one of them."
            )
        kind = column_type(column)
        if kind is None:
            why = f"binlake does not evaluate expressions over {column.column_type} columns"
            raise self.refuse(node, why, f"project `{column.name}` as it is, or leave it out")
        return Node("column", kind, value=column.name, sql=column.name, columns=frozenset({column.name}))

    def children(self, node: exp.Expression, *parts: exp.Expression) -> tuple[Node, ...]:
        return tuple(self._node(p) for p in parts)


def make(op: str, kind: SqlType, args: tuple[Node, ...], node: exp.Expression, value: Any = None) -> Node:
    """A node over ``args`` (its columns: theirs)."""
    columns = frozenset().union(*(a.columns for a in args)) if args else frozenset()
    metadata = any(a.uses_metadata for a in args)
    return Node(op, kind, args, value, node.sql(dialect="mysql"), columns, metadata)
