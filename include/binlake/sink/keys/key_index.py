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

Like the history's current versions, a sorted run of keys (``sink/keys/run_index.py``: the base,
the delta, the log, how keys are kept), here each with its file and row position; a SQLite index cost
2.3× per batch at 4× the keys (CPU in the B-tree; its cache, memory-mapping or sorted keys changed
nothing). Memory: the delta, 20 bytes a key.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.table import Table

from binlake.sink.keys.key_index_store import Run, among, concat, distinct
from binlake.sink.keys.run_index import RunIndex
from binlake.sink.keys.table_keys import KeyIndexError, file_keys, live_keys

log = logging.getLogger(__name__)

#: A key's record: the id of its row's data file (-1: removed) and the row's position there.
ROW = np.dtype([("file", "<i4"), ("pos", "<i8")])


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


class KeyIndex(RunIndex):
    """The key → (file, position) index of one Iceberg table (see the module docstring).

    Args:
        path: the index's folder (created when missing).
        key_columns: the table's key columns (its identifier fields), in order.
    """

    FORMAT = "4"
    VALUES = ROW

    _paths: dict[int, str]  # file id → data file
    _ids: dict[str, int]
    _live: dict[int, int]  # file id → its rows the index holds
    _next: int  # the next file id

    def __init__(self, path: Path, key_columns: Sequence[str]) -> None:
        path.with_name(f"{path.name}.sqlite").unlink(missing_ok=True)  # the index's format until 2026-11
        self._found: tuple[np.ndarray, np.ndarray] | None = None  # the last keys looked up, their files
        super().__init__(path, key_columns)

    # -- what it describes ---------------------------------------------------------------------

    def describes(self, table: Table) -> bool:
        """Whether the index holds exactly the table's current snapshot."""
        return self._identity is not None and self._identity == self.identity(table)

    # -- building -------------------------------------------------------------------------------

    def rebuild(self, table: Table) -> None:
        """Index every live row of the table's current snapshot (reads every data file's keys)."""
        started = time.monotonic()
        identity = self.identity(table)
        self._start(identity)
        self._identity = None  # until the build is written: a failed one describes nothing
        keys, values = [], []
        if table.current_snapshot() is not None:
            key_schema = table.schema().select(*self.key_columns)
            for task in table.scan().plan_files():
                data, at = live_keys(table, task, key_schema)
                keys.append(self._encode(data))
                values.append(_rows(np.full(len(at), self._file_id(task.file.file_path), np.int32), at))
        run = self._sorted_unique(table, concat(keys, self._dtype), concat(values, ROW))
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

    def _sorted_unique(self, table: Table, keys: np.ndarray, values: np.ndarray) -> Run:
        run = self._sorted(keys, values)
        twice = np.flatnonzero(run.keys[1:] == run.keys[:-1])
        if len(twice):
            raise KeyStoredTwiceError(
                table, self.key_columns, self._paths[int(run.values["file"][twice[0] + 1])]
            )
        return run

    # -- a batch --------------------------------------------------------------------------------

    def positions(self, keys: pa.Table) -> dict[str, list[int]]:
        """Data file → sorted positions of the stored rows of ``keys`` (keys not stored: absent)."""
        encoded = distinct(self._encode(keys))
        found = self._lookup(encoded)
        files, pos = found["file"], found["pos"]
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
        gone = distinct(self._encode(keys))
        self._change(table, gone, added, (), check=True)

    def moved(self, table: Table, removed: Sequence[str], added: Sequence[str], before: int | None) -> None:
        """After a commit that rewrote the files ``removed`` (their live rows) into ``added``: the
        keys point into the new files, and the index describes the new snapshot (if it described
        ``before``)."""
        if not self._described(before):
            return
        self._change(table, np.empty(0, self._dtype), added, removed, check=False)

    def _change(
        self, table: Table, gone: np.ndarray, added: Sequence[str], removed: Sequence[str], check: bool
    ) -> None:
        """Remove the ``gone`` keys, record the keys of the files ``added`` (``check``: none of them
        may be live elsewhere) and drop the files ``removed``: in memory, then as one log record."""
        identity = self.identity(table)
        key_schema = table.schema().select(*self.key_columns)
        new_ids = {path: self._file_id(path) for path in added}
        parts = []
        for path in added:
            data = file_keys(table, path, key_schema).cast(key_schema.as_arrow())
            parts.append((self._encode(data), new_ids[path]))
        put = concat([k for k, _ in parts], self._dtype)
        files = concat([np.full(len(k), f, np.int32) for k, f in parts], np.int32)
        pos = concat([np.arange(len(k), dtype=np.int64) for k, _ in parts], np.int64)
        run = self._sorted(put, _rows(files, pos))
        if check:
            self._check_new(table, run, gone)
        found, self._found = self._found, None
        was = found[1] if found is not None and np.array_equal(found[0], gone) else None
        dropped = [self._ids[path] for path in removed if path in self._ids]
        record: dict[str, Any] = {"before": self._identity, "after": identity, "dropped": dropped}
        record["files"] = {str(i): p for p, i in new_ids.items()}
        try:
            if self._replay(record, gone, run.keys, run.values, was):
                log.warning("the key index of %s kept rows of rewritten files: rebuilding it", table.name())
                self.forget()
                return
            self._append(record, (gone, run.keys, run.values))
        except BaseException:
            self.forget()  # half applied: describes nothing
            raise

    def _check_new(self, table: Table, run: Run, gone: np.ndarray) -> None:
        """A new row's key must be unique among the new rows and not live outside the batch."""
        put = run.keys
        twice = np.flatnonzero(put[1:] == put[:-1])
        outside = np.flatnonzero(~among(gone, put))
        elsewhere = outside[self._lookup(put[outside])["file"] >= 0]
        if len(twice) or len(elsewhere):
            self.forget()
            at = int(twice[0] + 1) if len(twice) else int(elsewhere[0])
            raise KeyStoredTwiceError(table, self.key_columns, self._paths[int(run.values["file"][at])])

    def _replay(
        self, record: dict[str, Any], gone: np.ndarray, put: np.ndarray, values: np.ndarray,
        was: np.ndarray | None = None,
    ) -> int:  # fmt: skip
        """One batch's change, in memory (also how the log is read back; ``was``: the files of the
        ``gone`` keys' rows, if known), with the rows each file holds counted; the rows the index
        still holds in the files it drops (a rewrite that left some out: then it is not appended)."""
        self._found = None
        for key, path in record["files"].items():
            self._paths[int(key)], self._ids[path] = path, int(key)
            self._next = max(self._next, int(key) + 1)
        self._count(self._lookup(gone)["file"] if was is None else was, -1)
        moving = put[~among(gone, put)]  # keys the batch did not remove: their rows leave old files
        self._count(self._lookup(moving)["file"], -1)
        super()._replay(record, gone, put, values)
        self._count(values["file"], 1)
        stranded = 0
        for file in record["dropped"]:
            self._ids.pop(self._paths.pop(file, ""), None)
            stranded += self._live.pop(file, 0)
        return stranded

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
        paths = [self._paths[f] for f in run.values["file"].tolist()]
        return set(zip(run.keys.tolist(), paths, run.values["pos"].tolist(), strict=True))

    # -- the files ------------------------------------------------------------------------------

    def _start(self, identity: dict[str, str] | None) -> None:
        super()._start(identity)
        self._found = None
        self._paths, self._ids, self._live, self._next = {}, {}, {}, 0

    def _file_id(self, path: str) -> int:
        if path not in self._ids:
            self._ids[path], self._paths[self._next] = self._next, path
            self._next += 1
        return self._ids[path]

    def _base_meta(self, run: Run) -> dict[str, Any]:
        used = np.flatnonzero(_per_file(run.values["file"])).tolist()
        return {"files": {str(f): self._paths[f] for f in used}}

    def _loaded(self, meta: dict[str, Any]) -> bool:
        if not isinstance(meta.get("files"), dict):
            return False
        self._paths = {int(f): p for f, p in meta["files"].items()}
        self._ids = {p: f for f, p in self._paths.items()}
        self._next = max(self._paths, default=-1) + 1
        self._count(np.asarray(self._base.values["file"]), 1)
        return True


def _rows(files: np.ndarray, pos: np.ndarray) -> np.ndarray:
    values = np.empty(len(files), ROW)
    values["file"], values["pos"] = files, pos
    return values


def _per_file(files: np.ndarray) -> np.ndarray:
    """How many of ``files`` (ids, -1: none) name each file id."""
    return np.bincount(files[files >= 0]) if len(files) else np.zeros(0, np.int64)
