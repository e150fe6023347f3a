"""Parameters bound around identifiers: a `%` inside backquotes is the name's own."""

from __future__ import annotations

from binlake.events import quote
from binlake.source.server.cursors import literal_percents, protect_identifiers


def test_percents_in_identifiers_survive_binding_and_literals_keep_their_meaning() -> None:
    table, column = quote("t%s `x`"), quote("100% 'a'")
    sql = f"SELECT {column}, 'lit `%%` %%' FROM {table} WHERE {column} >= %s"
    assert (
        protect_identifiers(sql) % ("5",) == f"SELECT {column}, 'lit `%` %' FROM {table} WHERE {column} >= 5"
    )
    # SQL of its own (a computed column `v % 3`) made ready for parameters, names untouched.
    assert literal_percents(f"SELECT v % 3, {column} FROM {table}") == f"SELECT v %% 3, {column} FROM {table}"
    assert protect_identifiers(literal_percents(f"SELECT v % 3, {column}")) % () == f"SELECT v % 3, {column}"
