"""Chunk checksums of the state a changelog table replays to (``sink/history/changelog.py``).

A changelog holds no state, only changes; ``verify`` compares the state they replay to with the
source, as it compares an upsert table's rows (``verify.sink_sums``). Two readings, both in one
pass over the pinned snapshot:

- **signed**: ``+I``/``+U`` add their row, ``-U``/``-D`` remove theirs; counts and hash sums add up
  (mod 2^64), so the replayed state's sums need no sort and no memory beyond the chunks' sums. A
  removal whose image is not the row the changelog added shows as a drift too. This is the
  replay of a changelog with both images of each update, and of any table without a key.
- **by key** (``changelog_updates: after``: an update's ``+U`` alone replaces its key's row): each
  key's last change in (position, order) decides — a ``+I``/``+U`` is the row, a ``-U``/``-D`` none.
  The changes are folded as they are read, so memory follows the keys, not the changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from binlake.events import Column, CreateTable
from binlake.sink.history.changelog import AFTER, INSERT, OP, ORDER, POSITION
from binlake.sink.keys.row_match import same_key_as_next
from binlake.verify.canonical import Hashing, row_hashes
from binlake.verify.sink_sums import ChunkIndex, PinnedSink, Sums, add_rows, no_sums, pinned_rows

#: Changes held before folding them to each key's last (bounds the by-key reading's memory).
_FOLD_ROWS = 1_000_000
_HASH, _CHUNK, _LIVE = "__hash__", "__chunk__", "__live__"
_NOTHING = pa.table(
    {_LIVE: pa.array([], pa.bool_()), _HASH: pa.array([], pa.uint64()), _CHUNK: pa.array([], pa.int64())}
)


def changelog_sums(
    pinned: PinnedSink,
    schema: CreateTable,
    columns: Sequence[Column],
    key: str,
    chunks: ChunkIndex,
    routed: bool,
    keys: Sequence[str] = (),
    hashing: Hashing = "md5",
) -> Sums:
    """Rows and hash sums per chunk of the state ``schema.table``'s changes in the pinned changelog
    replay to; ``keys``: the sink table's key, to replay by (empty: signed); ``hashing``: as the
    server hashes."""
    counts, totals = no_sums(len(chunks))
    names = [c.name for c in columns]
    names += [k for k in keys if k not in names] + [OP, POSITION, ORDER]
    last = _LastByKey(keys) if keys else None
    for rows in pinned_rows(pinned, schema, names, routed):
        at, hashes = chunks.of(rows.column(key)), row_hashes(rows, columns, hashing)
        adds = pc.is_in(rows.column(OP), pa.array([INSERT, AFTER])).to_numpy(zero_copy_only=False)
        if last is None:
            add_rows(counts, totals, at, hashes, np.where(adds, 1, -1))
        else:
            last.add(rows.select([*keys, POSITION, ORDER]), adds, hashes, at)
    if last is not None:
        state = last.folded()
        live = state.column(_LIVE).to_numpy(zero_copy_only=False)
        at = state.column(_CHUNK).to_numpy(zero_copy_only=False)[live]
        add_rows(counts, totals, at, state.column(_HASH).to_numpy(zero_copy_only=False)[live], 1)
    return counts, totals


class _LastByKey:
    """Each key's last change (by position, then order) among the changes added."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = list(keys)
        self._parts: list[pa.Table] = []
        self._rows = 0

    def add(self, changes: pa.Table, live: np.ndarray, hashes: np.ndarray, chunk: np.ndarray) -> None:
        """``changes``: the key, position and order of each; ``live``: whether it leaves a row."""
        part = changes.append_column(_LIVE, pa.array(live, pa.bool_()))
        part = part.append_column(_HASH, pa.array(hashes, pa.uint64()))
        self._parts.append(part.append_column(_CHUNK, pa.array(chunk, pa.int64())))
        self._rows += changes.num_rows
        if self._rows > _FOLD_ROWS:
            self._parts = [self.folded()]
            self._rows = self._parts[0].num_rows

    def folded(self) -> pa.Table:
        """One row per key: its last change."""
        if not self._parts:
            return _NOTHING
        table = pa.concat_tables(self._parts, promote_options="permissive").combine_chunks()
        order = [(k, "ascending") for k in self._keys] + [(POSITION, "ascending"), (ORDER, "ascending")]
        table = table.sort_by(order)
        return table.filter(pa.array(~same_key_as_next(table, self._keys)))  # each key's last change
