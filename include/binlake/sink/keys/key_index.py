"""Where each key's row lives in a merge-on-read table: key → (data file, row position).

A merge-on-read batch replaces rows by position deletes, so it must know the positions of its keys'
stored rows. Found by reading the key columns of every file whose bounds may hold a batch key,
that costs the table, not the batch, as soon as the keys are spread out (uniform keys meet every
file; ``bench/merge.py``: 3× the time at 4× the rows). Hudi keeps a record index for the same
reason. binlake's is a folder per sink table in the pipeline's work folder.

**It is a cache of the table, never the truth.** It records the Iceberg snapshot it describes
(with the table's uuid and key columns); the writer uses it only when that is the table's current
snapshot, and otherwise rebuilds it from the table (reading every live file's keys once, applying
the table's position deletes by position). So a crash between the Iceberg commit and the index's
update, a ``binlake maintain``, another writer, a lost work folder or a job on another machine cost
one rebuild, and never a wrong position. A key found twice while building means the table holds
one key in two live rows: the build stops and says so instead of picking one.

**Sorted arrays, searched a batch at a time.** A batch's keys are sorted and found by one binary
search (numpy), not one B-tree descent per key: a SQLite index cost 2.3× per batch at 4× the keys
(CPU in the B-tree; its cache, memory-mapping or sorted keys changed nothing). A *base* (every key in
order, with its file and row position) is written once and memory-mapped; the batches since then go
to a *delta* (sorted, in memory; a deleted key is a record without a file) and to a log, one record
per batch (``sink/keys/key_index_store.py``: how these files survive a kill or a machine crash). Once the
delta holds an eighth of the base, the two are merged into a new base: a cost of the table paid once
per table/8 changed keys, so still in proportion to the changes. Memory: the delta, 20 bytes a key.

A batch's record is written after its Iceberg commit: a process killed before it has written it
whole leaves an index describing the snapshot before the commit, so it is rebuilt.

Keys: one integer column is kept as it is; several integer columns as their bytes (big-endian, sign
bit flipped: exact and in key order); any other key as a 128-bit BLAKE2b digest of its values (two
keys sharing one: odds about n²/2¹²⁹, 10⁻²¹ at a billion keys).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.table import Table

from binlake.sink.keys import key_index_store as store
from binlake.sink.keys.key_index_store import Run, among, concat
from binlake.sink.keys.table_keys import KeyIndexError, file_keys, live_keys

log = logging.getLogger(__name__)

#: Bumped when the files' layout changes: an index of another version is rebuilt.
FORMAT = "3"
#: The delta is merged into a new base once it holds this share of the base's keys (and at least
#: ``_MIN_DELTA``): the merge rewrites the base, so its cost per changed key stays bounded.
_DELTA_SHARE = 8
_MIN_DELTA = 1 << 16


class KeyStoredTwiceError(KeyIndexError):
    """A key is in two live rows of the table (written by something else than binlake)."""

    def __init__(self, table: Table, key_columns: Sequence[str], path: str) -> None:
        self.found = (
            f"Cannot index the keys ({', '.join(key_columns)}) of the sink table {'.'.join(table.name())}: "
            f"a key is in two live rows (one in {path})."
        )
        super().__init__(
            f"{self.found} The table no longer equals its source. Fix: re-snapshot the table "
            "(`binlake plan --replan`, `binlake snapshot`)."
        )


class KeyIndex:
    """The key → (file, position) index of one Iceberg table (see the module docstring).

    Args:
        path: the index's folder (created when missing).
        key_columns: the table's key columns (its identifier fields), in order.
    """

    _base: Run  # every key in order, memory-mapped
    _delta: Run  # the batches since, in memory
    _paths: dict[int, str]  # file id → data file
    _ids: dict[str, int]
    _live: dict[int, int]  # file id → its rows the index holds
    _next: int  # the next file id

    def __init__(self, path: Path, key_columns: Sequence[str]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        path.with_name(f"{path.name}.sqlite").unlink(missing_ok=True)  # the index's format until 2026-11
        self.path = path
        self.key_columns = list(key_columns)
        self._identity: dict[str, str] | None = None  # what it describes (None: nothing)
        self._found: tuple[np.ndarray, np.ndarray] | None = None  # the last keys looked up, their files
        self._generation = 0
        self._load()

    # -- what it describes ---------------------------------------------------------------------

    def describes(self, table: Table) -> bool:
        """Whether the index holds exactly the table's current snapshot."""
        return self._identity is not None and self._identity == _identity(table, self.key_columns)

    def forget(self) -> None:
        """The table changed in a way not recorded here: rebuild before the next use (its snapshot
        moved on, so a later process finds the files behind the table too)."""
        self._identity = None

    # -- building -------------------------------------------------------------------------------

    def rebuild(self, table: Table) -> None:
        """Index every live row of the table's current snapshot (reads every data file's keys)."""
        started = time.monotonic()
        identity = _identity(table, self.key_columns)
        self._start(identity)
        self._identity = None  # until the build is written: a failed one describes nothing
        keys, files, pos = [], [], []
        if table.current_snapshot() is not None:
            key_schema = table.schema().select(*self.key_columns)
            for task in table.scan().plan_files():
                data, at = live_keys(table, task, key_schema)
                keys.append(self._encode(data))
                files.append(np.full(len(at), self._file_id(task.file.file_path), np.int32))
                pos.append(at)
        run = self._sorted_unique(
            table, concat(keys, self._dtype), concat(files, np.int32), concat(pos, np.int64)
        )
        self._write_base(run, identity)
        log.info(
            "indexed the keys of %s: %d rows in %.2f s (%s)",
            table.name(), len(run.keys), time.monotonic() - started, self.path,
        )  # fmt: skip

    def ready(self, table: Table) -> bool:
        """Whether the index describes ``table``'s current snapshot, rebuilt if it did not. False
        when the table holds a key twice: written by something else than binlake, a backfill
        repairs it, and merges until then find a key's rows by scanning the files that may hold it
        (every row with the key: exact for the keys they change), so the stream need not stop."""
        if self.describes(table):
            return True
        try:
            self.rebuild(table)
        except KeyStoredTwiceError as e:  # other faults (equality deletes) stop the stream, with their fix
            log.warning(
                "%s Until a backfill of the table repairs it (`binlake verify --repair`), its batches "
                "are merged without the key index (slower)",
                e.found,
            )
            return False
        return True

    def _sorted_unique(self, table: Table, keys: np.ndarray, files: np.ndarray, pos: np.ndarray) -> Run:
        order = np.argsort(keys, kind="stable")
        run = Run(keys[order], files[order], pos[order])
        twice = np.flatnonzero(run.keys[1:] == run.keys[:-1])
        if len(twice):
            raise KeyStoredTwiceError(table, self.key_columns, self._paths[int(run.files[twice[0] + 1])])
        return run

    # -- a batch --------------------------------------------------------------------------------

    def positions(self, keys: pa.Table) -> dict[str, list[int]]:
        """Data file → sorted positions of the stored rows of ``keys`` (keys not stored: absent)."""
        encoded = np.unique(self._encode(keys))
        files, pos = self._lookup(encoded)
        self._found = (encoded, files)  # the batch's update after its commit looks them up no more
        stored = files >= 0
        files, pos = files[stored], pos[stored]
        order = np.lexsort((pos, files))
        files, pos = files[order], pos[order]
        cuts = np.flatnonzero(np.diff(files)) + 1
        return {
            self._paths[int(f[0])]: p.tolist()
            for f, p in zip(np.split(files, cuts), np.split(pos, cuts), strict=True)
            if len(f)
        }

    def apply(self, table: Table, keys: pa.Table, added: Sequence[str], before: int | None) -> None:
        """After a commit that replaced the rows of ``keys`` and added the files ``added``: the
        index now describes the table's new snapshot, if it described ``before`` (the snapshot the
        batch was merged on); else it is left to be rebuilt."""
        if not self._described(before):
            return
        gone = np.unique(self._encode(keys))
        self._change(table, gone, added, (), check=True)

    def moved(self, table: Table, removed: Sequence[str], added: Sequence[str], before: int | None) -> None:
        """After a commit that rewrote the files ``removed`` (their live rows) into ``added``: the
        keys point into the new files, and the index describes the new snapshot (if it described
        ``before``)."""
        if not self._described(before):
            return
        self._change(table, np.empty(0, self._dtype), added, removed, check=False)

    def _described(self, before: int | None) -> bool:
        return self._identity is not None and self._identity["snapshot"] == str(before)

    def _change(
        self, table: Table, gone: np.ndarray, added: Sequence[str], removed: Sequence[str], check: bool
    ) -> None:
        """Remove the ``gone`` keys, record the keys of the files ``added`` (``check``: none of them
        may be live elsewhere) and drop the files ``removed``: in memory, then as one log record."""
        identity = _identity(table, self.key_columns)
        key_schema = table.schema().select(*self.key_columns)
        new_ids = {path: self._file_id(path) for path in added}
        parts = []
        for path in added:
            data = file_keys(table, path, key_schema).cast(key_schema.as_arrow())
            parts.append((self._encode(data), new_ids[path]))
        put = concat([k for k, _ in parts], self._dtype)
        files = concat([np.full(len(k), f, np.int32) for k, f in parts], np.int32)
        pos = concat([np.arange(len(k), dtype=np.int64) for k, _ in parts], np.int64)
        order = np.argsort(put, kind="stable")
        put, files, pos = put[order], files[order], pos[order]
        if check:
            self._check_new(table, put, files, gone)
        found, self._found = self._found, None
        was = found[1] if found is not None and np.array_equal(found[0], gone) else None
        dropped = [self._ids[path] for path in removed if path in self._ids]
        record: dict[str, Any] = {"before": self._identity, "after": identity, "dropped": dropped}
        record["files"] = {str(i): p for p, i in new_ids.items()}
        try:
            if self._replay(record, gone, put, files, pos, was):
                log.warning("the key index of %s kept rows of rewritten files: rebuilding it", table.name())
                self.forget()
                return
            self._append(record, (gone, put, files, pos))
        except BaseException:
            self.forget()  # half applied: describes nothing
            raise

    def _check_new(self, table: Table, put: np.ndarray, files: np.ndarray, gone: np.ndarray) -> None:
        """A new row's key must be unique among the new rows and not live outside the batch."""
        twice = np.flatnonzero(put[1:] == put[:-1])
        outside = np.flatnonzero(~among(gone, put))
        elsewhere = outside[self._lookup(put[outside])[0] >= 0]
        if len(twice) or len(elsewhere):
            self.forget()
            at = int(twice[0] + 1) if len(twice) else int(elsewhere[0])
            raise KeyStoredTwiceError(table, self.key_columns, self._paths[int(files[at])])

    def _replay(
        self, record: dict[str, Any], gone: np.ndarray, put: np.ndarray, files: np.ndarray, pos: np.ndarray,
        was: np.ndarray | None = None,
    ) -> int:  # fmt: skip
        """One batch's change, in memory (also how the log is read back; ``was``: the files of the
        ``gone`` keys' rows, if known); the rows the index still holds in the files it drops (a
        rewrite that left some out: then it is not appended)."""
        self._found = None
        for key, path in record["files"].items():
            self._paths[int(key)], self._ids[path] = path, int(key)
            self._next = max(self._next, int(key) + 1)
        self._count(self._lookup(gone)[0] if was is None else was, -1)
        deleted = np.full(len(gone), -1, np.int32)
        self._delta = self._delta.upsert(gone, deleted, np.zeros(len(gone), np.int64))
        moving = put[~among(gone, put)]  # keys the batch did not remove: their rows leave old files
        self._count(self._lookup(moving)[0], -1)
        self._delta = self._delta.upsert(put, files, pos)
        self._count(files, 1)
        stranded = 0
        for file in record["dropped"]:
            self._ids.pop(self._paths.pop(file, ""), None)
            stranded += self._live.pop(file, 0)
        self._identity = record["after"]
        return stranded

    def _lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """File id (-1: not stored) and row position of each of ``keys`` (sorted)."""
        files = np.full(len(keys), -1, np.int32)
        pos = np.zeros(len(keys), np.int64)
        for run in (self._base, self._delta):  # the delta is newer
            at, hit = run.find(keys)
            files[hit] = run.files[at[hit]]
            pos[hit] = run.pos[at[hit]]
        return files, pos

    def _count(self, files: np.ndarray, sign: int) -> None:
        counts = _per_file(files)  # file ids are few and small: a count per id, not a sort
        for file in np.flatnonzero(counts).tolist():
            self._live[file] = self._live.get(file, 0) + sign * int(counts[file])

    def live_rows(self) -> dict[str, int]:
        """Data file → rows of it the index holds (its rows no delete removed)."""
        return {path: self._live.get(file, 0) for file, path in self._paths.items()}

    def records(self) -> set[tuple[Any, str, int]]:
        """Every stored key (as kept: an integer, or bytes), with its file and row position."""
        run = self._base.updated(self._delta)
        paths = [self._paths[f] for f in run.files.tolist()]
        return set(zip(run.keys.tolist(), paths, run.pos.tolist(), strict=True))

    # -- the files ------------------------------------------------------------------------------

    def _start(self, identity: dict[str, str] | None) -> None:
        """Empty, describing ``identity`` (None: nothing), its keys kept as the table's need."""
        self._identity, self._found = identity, None
        self._encoding = identity["encoding"] if identity is not None else "int"
        self._dtype = _dtype(self._encoding, len(self.key_columns))
        self._base, self._delta = Run.empty(self._dtype), Run.empty(self._dtype)
        self._paths, self._ids, self._live, self._next = {}, {}, {}, 0

    def _file_id(self, path: str) -> int:
        if path not in self._ids:
            self._ids[path], self._paths[self._next] = self._next, path
            self._next += 1
        return self._ids[path]

    def _write_base(self, run: Run, identity: dict[str, str]) -> None:
        """``run`` as the next base, describing ``identity``, with an empty log after it."""
        used = np.flatnonzero(_per_file(run.files)).tolist()
        meta = {"identity": identity, "files": {str(f): self._paths[f] for f in used}}
        store.write_base(self.path, self._generation + 1, run, meta)
        self._load()

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
        if identity.get("format") != FORMAT or identity.get("keys") != ",".join(self.key_columns):
            return
        self._start(identity)
        self._base = base
        self._paths = {int(f): p for f, p in meta["files"].items()}
        self._ids = {p: f for f, p in self._paths.items()}
        self._next = max(self._paths, default=-1) + 1
        self._count(np.asarray(base.files), 1)
        log_path, end = store.log_path(self.path, generation), 0
        for end_, record, arrays in store.records(log_path, (self._dtype, self._dtype, np.int32, np.int64)):
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


def _identity(table: Table, key_columns: Sequence[str]) -> dict[str, str]:
    snapshot = table.current_snapshot()
    types = [table.schema().select(k).as_arrow().field(0).type for k in key_columns]
    integer = all(pa.types.is_integer(t) for t in types)
    return {
        "format": FORMAT,
        "table": str(table.metadata.table_uuid),
        "snapshot": str(snapshot.snapshot_id if snapshot is not None else None),
        "keys": ",".join(key_columns),
        "encoding": ("int" if len(types) == 1 else "ints") if integer else "digest",
    }


def _int64(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.cast(pa.int64()).to_numpy(), np.int64)


def _per_file(files: np.ndarray) -> np.ndarray:
    """How many of ``files`` (ids, -1: none) name each file id."""
    return np.bincount(files[files >= 0]) if len(files) else np.zeros(0, np.int64)


def _dtype(encoding: str, columns: int) -> np.dtype[Any]:
    return np.dtype({"int": "int64", "ints": f"S{8 * columns}"}.get(encoding, "S16"))
