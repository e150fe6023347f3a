"""``binlake validate``'s checks of the captured tables (``source/server/validator.py`` runs them):
the include regexes match tables the user can see and SELECT from, each table has a key to split
and apply changes by, no foreign key changes their rows out of the binlog's sight, and each
``transform`` rule compiles against the tables it matches.
"""

from __future__ import annotations

import re
from typing import Any

import pymysql

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.source.server.checks import Check
from binlake.source.server.discovery import TableSelector, column_names, discover, list_tables, primary_keys
from binlake.source.server.foreign_keys import cascade_fix, cascading_keys
from binlake.source.server.privileges import Grants


def check_tables(
    conn: pymysql.Connection[Any], config: PipelineConfig, grants: Grants, account: str
) -> list[Check]:
    """The captured tables: matched by `source.tables`, readable, keyed (or given a chunk key),
    without cascading foreign keys, and their `transform` rules compiled."""
    source = config.source
    visible = list_tables(conn)
    selector = TableSelector(source.tables, source.tables_exclude)
    tables = selector.select(visible)
    versioned = selector.select(list_tables(conn, "SYSTEM VERSIONED"))
    if versioned:
        return [_refuse_versioned(versioned)]
    if not tables:
        shown = ", ".join(t.name for t in visible[:10]) + (" …" if len(visible) > 10 else "")
        return [
            Check(
                "tables",
                "error",
                f"`source.tables` {list(source.tables)} (minus `source.tables_exclude`) matches no "
                f"table the user can see; visible tables: {shown or 'none'}",
                "fix the regexes (each is matched in full against `database.table`, e.g. "
                "`shop\\.orders` or `shop\\..*`), or grant the user SELECT on the tables",
            )
        ]
    checks = [Check("tables", "ok", f"{len(tables)} tables match: " + _names(tables))]
    unmatched = selector.unmatched_patterns(visible)
    if unmatched:
        checks.append(
            Check(
                "tables",
                "warning",
                f"these `source.tables` patterns match no table: {unmatched}",
                "remove them or fix a typo",
            )
        )
    checks.append(_check_select(tables, grants, account))
    checks.append(_check_keys(conn, config, tables))
    checks.append(_check_foreign_keys(conn, tables))
    if config.transform:
        checks.extend(_check_transforms(conn, config, tables))
    return checks


def _refuse_versioned(tables: list[TableId]) -> Check:
    return Check(
        "tables",
        "error",
        f"system-versioned tables match `source.tables`: {_names(tables)}. Such a table keeps each "
        "row's old versions in it beside the current one: a read shows the current rows, the binlog "
        "writes the old versions too, and binlake captures neither as the table is",
        "exclude them (`source.tables_exclude`), or capture them from a server where they are not "
        "versioned; to keep the history in the lake, binlake's `history` mode keeps one "
        "(`sink.modes`)",
    )


def _check_transforms(
    conn: pymysql.Connection[Any], config: PipelineConfig, tables: list[TableId]
) -> list[Check]:
    """Each ``transform`` rule compiled against the tables it matches (``schema.transforms``)."""
    from binlake.schema.table_rules import table_rules  # the transforms' checks need the tables' schemas
    from binlake.schema.transforms import TransformError, transform_of

    rules = {t: table_rules(config, t) for t in tables}
    matched = [t for t, r in rules.items() if r.transform is not None]
    checks = []
    for schema in discover(conn, matched):
        try:
            transform_of(rules[schema.table], schema)
        except TransformError as e:
            message, _, fix = str(e).partition(" Fix: ")
            checks.append(Check("transform", "error", message, fix.rstrip(".") or None))
    unused = [
        r.source_table
        for r in config.transform
        if not any(re.fullmatch(r.source_table, t.name) for t in tables)
    ]
    if unused:
        message = f"these `transform` rules match no captured table: {unused}"
        checks.append(Check("transform", "warning", message, "remove them or fix a typo"))
    if matched and not any(c.status == "error" for c in checks):
        checks.append(Check("transform", "ok", f"{len(matched)} tables transformed: " + _names(matched)))
    return checks


def _check_foreign_keys(conn: pymysql.Connection[Any], tables: list[TableId]) -> Check:
    cascading = cascading_keys(conn, tables)
    if not cascading:
        return Check("foreign_keys", "ok", "no captured table has a cascading foreign key")
    return Check(
        "foreign_keys",
        "error",
        "; ".join(k.describe() for k in cascading)
        + ": the child rows the server deletes or updates through these keys are not in the binlog "
        "(MySQL up to 8.4 and MariaDB write only the parent's row), so those sink tables would keep "
        "rows their source no longer has",
        cascade_fix(cascading[0]),
    )


def _check_select(tables: list[TableId], grants: Grants, account: str) -> Check:
    denied = [t for t in tables if not grants.can_select(t.database, t.table)]
    if denied:
        return Check(
            "select",
            "error",
            f"the user cannot SELECT from {_names(denied)}, needed for the snapshot",
            f"as an admin, run `GRANT SELECT ON <database>.* TO {account}` for each database",
        )
    return Check("select", "ok", f"the user can SELECT from all {len(tables)} tables")


def _check_keys(conn: pymysql.Connection[Any], config: PipelineConfig, tables: list[TableId]) -> Check:
    chunk_keys = config.source.chunk_key_columns
    keys = primary_keys(conn, tables)
    columns = column_names(conn, tables)
    keyless = [t for t in tables if not keys[t] and t.name not in chunk_keys]
    bad_chunk_keys = [
        f"`{t.name}`: column `{chunk_keys[t.name]}` does not exist (columns: {', '.join(columns[t])})"
        for t in tables
        if t.name in chunk_keys and chunk_keys[t.name] not in columns[t]
    ]
    problems: list[str] = []
    fixes: list[str] = []
    if keyless:
        problems.append(
            f"{_names(keyless)} {'has' if len(keyless) == 1 else 'have'} no primary key and no "
            "chunk key, so binlake cannot split or apply changes by key"
        )
        example = keyless[0]
        fixes.append(
            f'add a primary key, or set `source.chunk_key_columns: {{"{example.name}": <column>}}` '
            "(an indexed column; rows are then matched by whole-row identity), or exclude the "
            "table with `source.tables_exclude`"
        )
    if bad_chunk_keys:
        problems.append("`source.chunk_key_columns` names missing columns: " + "; ".join(bad_chunk_keys))
        fixes.append("name an existing column in `source.chunk_key_columns`")
    if problems:
        return Check("keys", "error", "; ".join(problems), "; ".join(fixes))
    with_chunk_key = sum(1 for t in tables if not keys[t])
    detail = f" ({with_chunk_key} by configured chunk key)" if with_chunk_key else ""
    return Check("keys", "ok", f"every table has a primary key or a chunk key{detail}")


def _names(tables: list[TableId], limit: int = 8) -> str:
    shown = ", ".join(f"`{t.name}`" for t in tables[:limit])
    return shown + (f" and {len(tables) - limit} more" if len(tables) > limit else "")
