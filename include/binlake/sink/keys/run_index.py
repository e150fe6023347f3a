"""A cache of one Iceberg table as its keys in order, each with a record: the key index's
(``sink/keys/key_index.py``: where each key's row lives) and a history's current versions
(``sink/history/current_versions.py``: which version of each key is current, since when).

**Never the truth.** An index records what it describes (its *identity*: the table's uuid, the
snapshot, the key columns, how the keys are kept) and is used only while that is the table's; else
it is rebuilt from the table. A batch's change is recorded after its Iceberg commit, and only if the
index described the snapshot the batch was merged on.

**Sorted arrays, searched a batch at a time.** A batch's keys are sorted and found by one binary
search (numpy), not one B-tree descent per key. A *base* (every key in order, with its record) is
written once and memory-mapped; the batches since then go to a *delta* (sorted, in memory; a removed
key is a record whose first field is negative) and to a log, one record per batch
(``sink/keys/key_index_store.py``: how these files survive a kill or a machine crash). Once the delta
holds an eighth of the base, the two are merged into a new base: a cost of the table paid once per
table/8 changed keys, so still in proportion to the changes.

Keys: one integer column is kept as it is; several integer columns as their bytes (big-endian, sign
bit flipped: exact and in key order); any other key as a 128-bit BLAKE2b digest of its values (two
keys sharing one: odds about n²/2¹²⁹, 10⁻²¹ at a billion keys).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from pyiceberg.table import Table

from binlake.sink.keys import key_index_store as store
from binlake.sink.keys.key_index_store import Run

#: The delta is merged into a new base once it holds this share of the base's keys (and at least
#: ``_MIN_DELTA``): the merge rewrites the base, so its cost per changed key stays bounded.
_DELTA_SHARE = 8
_MIN_DELTA = 1 << 16


class RunIndex:
    """The keys of one Iceberg table in order, each with a record of ``VALUES`` (see the module
    docstring); ``path``: its folder (created when missing); ``key_columns``: the keys' columns."""

    FORMAT: ClassVar[str]
    """Bumped when the files' layout changes: an index of another version is rebuilt."""
    VALUES: ClassVar[np.dtype[Any]]
    """A key's record; its first field is negative for a key removed."""

    _base: Run  # every key in order, memory-mapped
    _delta: Run  # the batches since, in memory

    def __init__(self, path: Path, key_columns: Sequence[str]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.key_columns = list(key_columns)
        self._identity: dict[str, str] | None = None  # what it describes (None: nothing)
        self._generation = 0
        self._load()

    # -- what it describes ---------------------------------------------------------------------

    def identity(self, table: Table, **more: str) -> dict[str, str]:
        """What an index of ``table``'s current snapshot describes (``more``: what else it rests on)."""
        snapshot = table.current_snapshot()
        types = [table.schema().select(k).as_arrow().field(0).type for k in self.key_columns]
        integer = all(pa.types.is_integer(t) for t in types)
        return {
            "format": self.FORMAT,
            "table": str(table.metadata.table_uuid),
            "snapshot": str(snapshot.snapshot_id if snapshot is not None else None),
            "keys": ",".join(self.key_columns),
            "encoding": ("int" if len(types) == 1 else "ints") if integer else "digest",
            **more,
        }

    def forget(self) -> None:
        """The table changed in a way not recorded here: rebuild before the next use (its snapshot
        moved on, so a later process finds the files behind the table too)."""
        self._identity = None

    def _described(self, before: int | None) -> bool:
        return self._identity is not None and self._identity["snapshot"] == str(before)

    # -- records --------------------------------------------------------------------------------

    def _lookup(self, keys: np.ndarray) -> np.ndarray:
        """The record of each of ``keys`` (sorted; the first field -1 where none)."""
        values = self._removed(len(keys))
        for run in (self._base, self._delta):  # the delta is newer
            at, hit = run.find(keys)
            values[hit] = run.values[at[hit]]
        return values

    def _removed(self, n: int) -> np.ndarray:
        values = np.zeros(n, self.VALUES)
        values[store.presence(self.VALUES)] = -1
        return values

    def _sorted(self, keys: np.ndarray, values: np.ndarray) -> Run:
        order = np.argsort(keys, kind="stable")
        return Run(keys[order], values[order])

    def _replay(self, record: dict[str, Any], gone: np.ndarray, put: np.ndarray, values: np.ndarray) -> int:
        """One batch's change, in memory (also how the log is read back): the ``gone`` keys
        removed, then the ``put`` ones set; what it could not account for (none here; the key
        index's rows of files a rewrite dropped)."""
        self._delta = self._delta.upsert(gone, self._removed(len(gone)))
        self._delta = self._delta.upsert(put, values)
        self._identity = record["after"]
        return 0

    def _record(self, record: dict[str, Any], gone: np.ndarray, put: np.ndarray, values: np.ndarray) -> None:
        """``_replay`` and log one batch's change (half applied: the index describes nothing)."""
        try:
            self._replay(record, gone, put, values)
            self._append(record, (gone, put, values))
        except BaseException:
            self.forget()
            raise

    # -- the files ------------------------------------------------------------------------------

    def _start(self, identity: dict[str, str] | None) -> None:
        """Empty, describing ``identity`` (None: nothing), its keys kept as the table's need."""
        self._identity = identity
        self._encoding = identity["encoding"] if identity is not None else "int"
        self._dtype = _dtype(self._encoding, len(self.key_columns))
        self._base, self._delta = Run.empty(self._dtype, self.VALUES), Run.empty(self._dtype, self.VALUES)

    def _write_base(self, run: Run, identity: dict[str, str]) -> None:
        """``run`` as the next base, describing ``identity``, with an empty log after it."""
        store.write_base(self.path, self._generation + 1, run, {"identity": identity, **self._base_meta(run)})
        self._load()

    def _loaded(self, meta: dict[str, Any]) -> bool:
        """Take what a base's ``meta`` holds beside its identity; False: it is not readable."""
        return True

    def _load(self) -> None:
        """The newest complete base and the log's records after it (unreadable: describes nothing)."""
        self._start(None)
        generation = store.newest_base(self.path)
        if generation is None:
            return
        self._generation = generation  # the next base is the next generation, whatever this one holds
        read = store.read_base(self.path, generation)
        if read is None:
            return
        meta, base = read
        identity = meta["identity"]
        if (
            identity.get("format") != self.FORMAT
            or identity.get("keys") != ",".join(self.key_columns)
            or base.values.dtype != self.VALUES
        ):
            return
        self._start(identity)
        self._base = base
        if not self._loaded(meta):
            self._start(None)
            return
        log_path, end = store.log_path(self.path, generation), 0
        for end_, record, arrays in store.records(log_path, (self._dtype, self._dtype, self.VALUES)):
            if record["before"] != self._identity:
                break
            self._replay(record, *arrays)
            end = end_
        store.cut(log_path, end)

    def _append(self, record: dict[str, Any], arrays: tuple[np.ndarray, ...]) -> None:
        store.append(store.log_path(self.path, self._generation), store.record_bytes(record, arrays))

    def consolidate(self) -> bool:
        """Merge the delta into a new base if it holds an eighth of the base; whether it did. A
        table's upkeep does it after a batch (``sink/upkeep.py``), so no batch waits for it."""
        if self._identity is None or len(self._delta.keys) <= max(
            _MIN_DELTA, len(self._base.keys) // _DELTA_SHARE
        ):
            return False
        self._write_base(self._base.updated(self._delta), self._identity)
        return True

    def _base_meta(self, run: Run) -> dict[str, Any]:
        """What a new base of ``run`` records beside its identity."""
        return {}

    # -- keys -----------------------------------------------------------------------------------

    def _encode(self, keys: pa.Table) -> np.ndarray:
        """Keys as the index keeps them (module docstring), in the batch's order."""
        columns = [keys.column(name) for name in self.key_columns]
        if self._encoding == "int":
            return _int64(columns[0])
        if self._encoding == "ints":
            flipped = [_int64(c).view(np.uint64) ^ np.uint64(1 << 63) for c in columns]
            wide = np.ascontiguousarray(np.stack(flipped, axis=1).astype(">u8"))
            return wide.view(self._dtype).ravel()
        values = zip(*(c.to_pylist() for c in columns), strict=True)
        return np.array(
            [hashlib.blake2b(repr(v).encode(), digest_size=16).digest() for v in values], self._dtype
        )


def _int64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.cast(pa.int64()).to_numpy(), np.int64)


def _dtype(encoding: str, columns: int) -> np.dtype[Any]:
    return np.dtype({"int": "int64", "ints": f"S{8 * columns}"}.get(encoding, "S16"))
