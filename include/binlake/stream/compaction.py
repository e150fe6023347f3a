"""Per-table compaction of a micro-batch's changes (Arrow, in the driver).

Tables with a primary key keep the last change per key by binlog position: a delete wins over
earlier changes, an insert after a delete is an upsert (a key update arrives as a delete of the
old key and an upsert of the new one). Tables without a key net whole rows out: each row image
counts +1 per insert and -1 per delete, so duplicates stay exact whatever the order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class KeyedChanges:
    upsert_images: list[bytes]
    delete_keys: list[bytes]


@dataclass(frozen=True)
class RowChanges:
    insert_images: list[bytes]
    remove_images: list[bytes]


def last_per_key(rows: pa.Table) -> KeyedChanges:
    """The last change per key of ``rows`` (one table's, sorted by ``at`` and ``idx``)."""
    numbered = rows.select(["key"]).append_column("n", pa.array(range(rows.num_rows), pa.int64()))
    last = numbered.group_by("key", use_threads=False).aggregate([("n", "max")]).column("n_max")
    final = rows.take(last)
    upserts = pc.equal(final.column("op"), "upsert")
    return KeyedChanges(
        final.filter(upserts).column("image").to_pylist(),
        final.filter(pc.invert(upserts)).column("key").to_pylist(),
    )


def net_rows(rows: pa.Table) -> RowChanges:
    """Whole-row changes of ``rows`` (one keyless table's) netted into rows to add and remove."""
    net: Counter[bytes] = Counter()
    for op, image in zip(rows.column("op").to_pylist(), rows.column("image").to_pylist(), strict=True):
        net[image] += 1 if op == "insert" else -1
    inserts = [image for image, n in net.items() for _ in range(max(0, n))]
    removes = [image for image, n in net.items() for _ in range(max(0, -n))]
    return RowChanges(inserts, removes)
