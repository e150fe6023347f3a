"""Comparing text key values the way the server does: in the column's own collation.

Python orders strings by code point; a case-insensitive or PAD SPACE collation orders and equates
them differently (``'a' = 'A '`` in ``utf8mb4_general_ci``), and WEIGHT_STRING does not apply PAD
SPACE either. So every comparison of text keys is a query, batched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pymysql

from binlake.events import Column

_IDENTIFIER = re.compile(r"^[A-Za-z0-9_]+$")
#: Comparisons per query (each is one SELECT of a UNION ALL).
BATCH = 500


def collated(column: Column, placeholder: str = "%s") -> str:
    """SQL for a parameter read as a value of ``column``'s charset and collation."""
    charset, collation = column.charset or "utf8mb4", column.collation or "utf8mb4_bin"
    if not (_IDENTIFIER.match(charset) and _IDENTIFIER.match(collation)):
        raise ValueError(f"unexpected charset/collation {charset}/{collation}")
    return f"CONVERT({placeholder} USING {charset}) COLLATE {collation}"


def greater_or_equal(
    conn: pymysql.Connection[Any], column: Column, pairs: Sequence[tuple[Any, Any]]
) -> list[bool]:
    """``a >= b`` for each pair, compared by the server in ``column``'s collation."""
    typed = collated(column)
    results: list[bool] = []
    for i in range(0, len(pairs), BATCH):
        part = pairs[i : i + BATCH]
        query = " UNION ALL ".join(f"SELECT {j}, {typed} >= {typed}" for j in range(len(part)))
        with conn.cursor() as cur:
            cur.execute(query, [v for pair in part for v in pair])
            answers = dict(cur.fetchall())
        results += [bool(answers[j]) for j in range(len(part))]
    return results


def chunk_indexes(
    conn: pymysql.Connection[Any], column: Column, values: Sequence[Any], starts: Sequence[Any]
) -> list[int]:
    """For each value, how many of the sorted ``starts`` are at or below it (its chunk's index
    when ``starts`` are the chunk borders after the first chunk); NULL sorts first.

    A binary search run for all values in lockstep: about log2(len(starts)) batched queries.
    """
    low = [0] * len(values)
    high = [0 if v is None else len(starts) for v in values]
    while True:
        active = [i for i in range(len(values)) if low[i] < high[i]]
        if not active:
            return low
        middles = {i: (low[i] + high[i]) // 2 for i in active}
        answers = greater_or_equal(conn, column, [(values[i], starts[middles[i]]) for i in active])
        for i, at_or_above in zip(active, answers, strict=True):
            if at_or_above:
                low[i] = middles[i] + 1
            else:
                high[i] = middles[i]
