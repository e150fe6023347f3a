"""The DDL oracle: binlake's DDL parser against the server itself, statement by statement.

For each statement of a corpus (``shared/ddl-corpus`` format: contexts of statements, replayed in
``sequence`` on one server or each ``standalone`` on a clean one), the harness reads every table
back with binlake's discovery before and after running it on a private MariaDB, applies what
binlake's parser says the statement does (``parse_ddl`` then ``schema.history.evolve``, as the
stream does), and compares the two. Many corpus statements refer to tables or columns the context
never creates (the peers fed them to a parser, not a server): the harness creates what the server
reports missing and runs the statement again.

Each statement gets one verdict:

- ``parsed``: binlake's changes give exactly the server's schemas;
- ``ignored``: binlake says the statement changes no table, and the server agrees;
- ``refused``: binlake refuses it (``UnparsedDdlError``) — ``needless`` too when the server changed
  no column of any table;
- ``crashed``: binlake raised anything else;
- ``wrong``: binlake's schemas differ from the server's (the difference is listed);
- ``skipped``: the server rejects the statement even after the repairs (not MariaDB syntax, …).

Compared per table: the columns in order, and every ``Column`` field decoding and the type mapping
use (type, signedness, precision, scale, fractional seconds, length, charset, collation, ENUM/SET
members, nullability, whether it is a boolean, the default), the primary key, the table's collation.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pymysql

from binlake.events import Column, CreateTable, TableId, describe_change
from binlake.schema.defaults import normalised_default
from binlake.schema.history import SchemaEvolutionError, evolve, tables_changed
from binlake.schema.type_mapping import is_bool
from binlake.source.ddl.parser import UnparsedDdlError, parse_ddl
from binlake.source.server.charsets import Charsets
from binlake.source.server.discovery import discover, server_charsets
from binlake.source.server.foreign_keys import ddl_target
from binlake.testing.private_server import PrivateMariaDB

log = logging.getLogger(__name__)

Verdict = Literal["parsed", "ignored", "refused", "crashed", "wrong", "skipped"]
VERDICTS: tuple[Verdict, ...] = ("parsed", "ignored", "refused", "crashed", "wrong", "skipped")

#: Databases the harness never drops.
_SYSTEM = {"mysql", "information_schema", "performance_schema", "sys"}
#: Attempts to run a statement, creating what the server reports missing in between.
_ATTEMPTS = 8
#: Column fields compared (see the module docstring).
_FIELDS = (
    "data_type", "unsigned", "precision", "scale", "fsp", "length", "charset", "collation", "values",
    "nullable", "default", "generated",
)  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """One statement's verdict."""

    context: str
    index: int
    statement: str
    verdict: Verdict
    detail: str = ""
    needless: bool = False
    """A refusal of a statement that changed no column of any table."""


@dataclass
class OracleReport:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        found = Counter(o.verdict for o in self.outcomes)
        counts: dict[str, int] = {v: found.get(v, 0) for v in VERDICTS}
        counts["needless_refusals"] = sum(o.needless for o in self.outcomes)
        counts["statements"] = len(self.outcomes)
        return counts

    def as_dict(self, details: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {"counts": self.counts(), "seconds": round(self.seconds, 1)}
        if details:
            for verdict in ("wrong", "crashed", "refused"):
                data[verdict] = [_outcome_dict(o) for o in self.outcomes if o.verdict == verdict]
        return data


def _outcome_dict(o: Outcome) -> dict[str, Any]:
    return {
        "context": o.context,
        "index": o.index,
        "statement": o.statement[:500],
        "detail": o.detail,
        "needless": o.needless,
    }


def read_corpus(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def run(server: PrivateMariaDB, contexts: Iterable[dict[str, Any]]) -> OracleReport:
    """Replay every context on ``server``; the databases a context makes are dropped after it
    (those the server held before the run are left alone)."""
    report = OracleReport()
    started = time.monotonic()
    with contextlib.closing(server.admin_connection()) as conn:
        kept = set(_databases(conn))
    for context in contexts:
        statements = list(context["statements"])
        if context.get("mode") == "standalone":
            for i, statement in enumerate(statements):
                with _fresh(server, context, kept) as conn:
                    report.outcomes.append(_check(conn, context, i, statement, kept))
        else:
            with _fresh(server, context, kept) as conn:
                for i, statement in enumerate(statements):
                    report.outcomes.append(_check(conn, context, i, statement, kept))
    report.seconds = time.monotonic() - started
    return report


@contextlib.contextmanager
def _fresh(
    server: PrivateMariaDB, context: dict[str, Any], kept: set[str]
) -> Iterator[pymysql.Connection[Any]]:
    """A new session on a server holding only the context's databases (a corpus statement may
    leave a transaction, table locks or session settings behind)."""
    conn = server.admin_connection()
    try:
        _reset(conn, context, kept)
        yield conn
    finally:
        with contextlib.suppress(pymysql.err.MySQLError):
            _drop_databases(conn, kept)
        conn.close()


def _reset(conn: pymysql.Connection[Any], context: dict[str, Any], kept: set[str]) -> None:
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = DEFAULT, foreign_key_checks = 0")
        _drop_databases(conn, kept)
        for database in {*context.get("dbs", []), context.get("default_db") or "test"}:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        cur.execute(f"USE `{context.get('default_db') or 'test'}`")


def _drop_databases(conn: pymysql.Connection[Any], kept: set[str]) -> None:
    with conn.cursor() as cur:
        cur.execute("ROLLBACK")
        cur.execute("UNLOCK TABLES")
        for database in _databases(conn):
            if database not in kept:
                cur.execute(f"DROP DATABASE `{database}`")


def _databases(conn: pymysql.Connection[Any]) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW DATABASES")
        return [str(r[0]) for r in cur.fetchall() if str(r[0]).lower() not in _SYSTEM]


def _schemas(conn: pymysql.Connection[Any], kept: set[str]) -> dict[TableId, CreateTable]:
    databases = [d for d in _databases(conn) if d not in kept]
    if not databases:
        return {}
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA IN %s",
            (tuple(databases),),
        )
        tables = [TableId(str(d), str(t)) for d, t in cur.fetchall()]
    return {s.table: s for s in discover(conn, tables)}


def _current_database(conn: pymysql.Connection[Any]) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT DATABASE()")
        row = cur.fetchone()
    return str(row[0]) if row and row[0] else ""


def _check(
    conn: pymysql.Connection[Any], context: dict[str, Any], index: int, statement: str, kept: set[str]
) -> Outcome:
    name = str(context.get("id", "?"))
    database = _current_database(conn)
    executed, before, error, charsets = _execute(conn, statement, kept)
    if not executed:
        return Outcome(name, index, statement, "skipped", error)
    after = _schemas(conn, kept)
    try:
        changes = parse_ddl(statement, database, before.get, charsets)
    except UnparsedDdlError as e:
        changed = _columns_changed(before, after)
        return Outcome(name, index, statement, "refused", str(e), needless=not changed)
    except Exception as e:  # the oracle's point: any other error is a crash of the parser
        return Outcome(name, index, statement, "crashed", f"{type(e).__name__}: {e}")
    try:
        expected = _evolved(before, changes)
    except SchemaEvolutionError as e:
        return Outcome(name, index, statement, "wrong", f"the changes do not fit the schema before: {e}")
    differences = _differences(expected, after)
    if differences:
        said = "; ".join(describe_change(c) for c in changes) or "no change"
        return Outcome(name, index, statement, "wrong", f"binlake: {said}. " + " ".join(differences[:8]))
    return Outcome(name, index, statement, "parsed" if changes else "ignored")


def _execute(
    conn: pymysql.Connection[Any], statement: str, kept: set[str]
) -> tuple[bool, dict[TableId, CreateTable], str, Charsets]:
    """Run ``statement``, creating what the server reports missing; the schemas and charset
    defaults right before the run that succeeded."""
    error = ""
    for _ in range(_ATTEMPTS):
        before = _schemas(conn, kept)
        charsets = server_charsets(conn)
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
            return True, before, "", charsets
        except pymysql.err.MySQLError as e:
            code = e.args[0] if e.args else None
            error = f"{code}: {e.args[1] if len(e.args) > 1 else e}"
            if not _repair(conn, statement, code, str(e.args[1]) if len(e.args) > 1 else ""):
                break
    return False, {}, error, Charsets()


_MISSING_TABLE = re.compile(r"Table '([^']+)' doesn't exist")
_MISSING_DATABASE = re.compile(r"Unknown database '([^']+)'")
_MISSING_COLUMN = re.compile(r"Unknown column '([^']+)'")
_CANT_DROP = re.compile(r"Can't DROP (?:COLUMN|INDEX|CONSTRAINT|FOREIGN KEY )?`?([^`';]+)`?")
_KEY_COLUMN = re.compile(r"Key column '([^']+)' doesn't exist")


def _repair(conn: pymysql.Connection[Any], statement: str, code: Any, message: str) -> bool:
    """Create what the server said is missing; False when there is nothing to create."""
    database = _current_database(conn) or "test"
    target = ddl_target(statement, database) or _first_table(statement, database)
    with conn.cursor() as cur:
        try:
            if code == 1049 and (m := _MISSING_DATABASE.search(message)):
                cur.execute(f"CREATE DATABASE `{m.group(1)}`")
                return True
            if code == 1146 and (m := _MISSING_TABLE.search(message)):
                db, _, table = m.group(1).rpartition(".")
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db or database}`")
                cur.execute(f"CREATE TABLE `{db or database}`.`{table}` (id INT)")
                return True
            if target is None:
                return False
            where = target.quoted()
            if code in (1054, 1072) and (m := _MISSING_COLUMN.search(message) or _KEY_COLUMN.search(message)):
                cur.execute(f"ALTER TABLE {where} ADD COLUMN `{m.group(1).split('.')[-1]}` INT")
                return True
            if code == 1091 and (m := _CANT_DROP.search(message)):
                name = m.group(1).strip()
                if re.search(r"\bDROP\s+(INDEX|KEY)\b", statement, re.IGNORECASE):
                    cur.execute(f"ALTER TABLE {where} ADD INDEX `{name}` (id)")
                else:
                    cur.execute(f"ALTER TABLE {where} ADD COLUMN `{name}` INT")
                return True
            if code == 1050:  # the table exists already: the corpus meant a new one
                cur.execute(f"DROP TABLE IF EXISTS {where}")
                return True
        except pymysql.err.MySQLError:
            return False
    return False


def _first_table(statement: str, database: str) -> TableId | None:
    """The first table a RENAME/DROP/TRUNCATE statement names (for repairs)."""
    match = re.search(
        r"\b(?:RENAME\s+TABLES?|DROP\s+TABLES?(?:\s+IF\s+EXISTS)?|TRUNCATE(?:\s+TABLE)?)\s+`?([\w$]+)`?(?:\.`?([\w$]+)`?)?",
        statement,
        re.IGNORECASE,
    )
    if match is None:
        return None
    return TableId(match.group(1), match.group(2)) if match.group(2) else TableId(database, match.group(1))


def _evolved(before: dict[TableId, CreateTable], changes: list[Any]) -> dict[TableId, CreateTable]:
    current = dict(before)
    for change in changes:
        snapshot = dict(current)
        for table in tables_changed(change):
            renamed = getattr(change, "new_table", None) == table
            old = snapshot.get(change.table if renamed else table)
            after = evolve(table, old, change)
            if after is None:
                current.pop(table, None)
            else:
                current[table] = after
    return current


def _columns_changed(before: dict[TableId, CreateTable], after: dict[TableId, CreateTable]) -> bool:
    if set(before) != set(after):
        return True
    return any(_differences({t: before[t]}, {t: after[t]}) for t in before)


def _differences(expected: dict[TableId, CreateTable], actual: dict[TableId, CreateTable]) -> list[str]:
    found: list[str] = []
    for table in sorted(set(expected) | set(actual)):
        ours, theirs = expected.get(table), actual.get(table)
        if ours is None or theirs is None:
            found.append(
                f"`{table}`: {'missing' if ours is None else 'should not exist'} in binlake's schemas."
            )
            continue
        names = [c.name for c in theirs.columns]
        if [c.name for c in ours.columns] != names:
            found.append(f"`{table}` columns: binlake {[c.name for c in ours.columns]}, server {names}.")
            continue
        for mine, server in zip(ours.columns, theirs.columns, strict=True):
            for name in _FIELDS:
                a, b = _field(mine, name), _field(server, name)
                if a != b:
                    found.append(f"`{table}`.`{mine.name}` {name}: binlake {a!r}, server {b!r}.")
            if is_bool(mine) != is_bool(server):
                found.append(
                    f"`{table}`.`{mine.name}` boolean: binlake {is_bool(mine)}, server {is_bool(server)}."
                )
        keys, server_keys = list(ours.primary_key), list(theirs.primary_key)
        if keys != server_keys:  # the spelling too: the binlog reader looks keys up by name
            found.append(f"`{table}` primary key: binlake {keys}, server {server_keys}.")
        if ours.collation != theirs.collation:
            found.append(f"`{table}` collation: binlake {ours.collation!r}, server {theirs.collation!r}.")
    return found


def _field(column: Column, name: str) -> Any:
    if name == "default":
        return normalised_default(column)
    return getattr(column, name)


def main(corpus: Path, as_json: bool, limit: int | None = None) -> int:
    """``python -m binlake.testing ddl-oracle``: a private MariaDB, the corpus, the counts."""
    contexts = list(read_corpus(corpus))[:limit]
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(PrivateMariaDB(options={"log-bin": None}))
        report = run(server, contexts)
    counts = report.counts()
    if not as_json:
        for outcome in report.outcomes:
            if outcome.verdict in ("wrong", "crashed") or outcome.needless:
                print(f"{outcome.verdict:8} {outcome.context}#{outcome.index}: {outcome.detail}")
                print(f"         {' '.join(outcome.statement.split())[:300]}")
    print(json.dumps({**report.as_dict(details=as_json), "counts": counts}))
    return 0 if counts["wrong"] == counts["crashed"] == 0 else 1
