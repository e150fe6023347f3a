"""Where each key's row lives in a merge-on-read table: key → (data file, row position).

A merge-on-read batch replaces rows by position deletes, so it must know the positions of its keys'
stored rows. Found by reading the key columns of every file whose bounds may hold a batch key,
that costs the table, not the batch, as soon as the keys are spread out (uniform keys meet every
file; ``bench/merge.py``: 3× the time at 4× the rows). Hudi keeps a record index for the same
reason. binlake's is a SQLite file per sink table in the pipeline's work folder: a batch looks its
keys up (point reads, a B-tree: the cost of the batch) and records where its new rows went.

**It is a cache of the table, never the truth.** It records the Iceberg snapshot it describes
(with the table's uuid and key columns); the writer uses it only when that is the table's current
snapshot, and otherwise rebuilds it from the table (reading every live file's keys once, applying
the table's position deletes by position). So a crash between the Iceberg commit and the index's
update, a ``binlake maintain``, another writer, a lost work folder or a job on another machine cost
one rebuild, and never a wrong position. A key found twice while building means the table holds
one key in two live rows: the build stops and says so instead of picking one.

Since it is a cache, it is written without SQLite's journal on disk (a WAL made a batch's 10k key
updates cost 0.29 s against 0.08 s without, on 4M keys): safety comes from the order of its writes
instead. An update first erases the record of what the index describes (its own commit), then
changes the keys (a second), and only then records the new snapshot (a third), so a process killed
anywhere leaves an index that describes nothing and is rebuilt — into a new file, whatever state the
old one was left in. A machine that crashed may have lost any of the file's unsynced pages, so the
record also names the boot it was written in (Linux's boot id; elsewhere each update is synced).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import FileScanTask, Table

from binlake.errors import BinlakeError

log = logging.getLogger(__name__)

#: Bumped when the file's layout changes: an index of another version is rebuilt.
FORMAT = "2"
#: Keys per statement when looking up or removing (SQLite's bound-variable limit is 32766).
_STEP = 20_000


class KeyIndexError(BinlakeError):
    """The table cannot be indexed by key as it is."""


class KeyIndex:
    """The key → (file, position) index of one Iceberg table (see the module docstring).

    Args:
        path: the SQLite file (created when missing).
        key_columns: the table's key columns (its identifier fields), in order.
    """

    def __init__(self, path: Path, key_columns: Sequence[str]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.key_columns = list(key_columns)
        self._integer: bool | None = None
        try:
            self._db = self._open()
        except sqlite3.DatabaseError:  # not a database any more (a crash, a disk): start afresh
            self._remove_files()
            self._db = self._open()

    def _remove_files(self) -> None:
        for path in (self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm"))):
            path.unlink(missing_ok=True)

    def _open(self) -> sqlite3.Connection:
        # Used by one thread at a time, but not always the one that opened it: a stream's writer
        # compacts in its upkeep thread (``sink/upkeep.py``), which the next batch waits for.
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # The journal only in memory: a failed statement still rolls back; a killed process is
        # covered by the order of the writes (module docstring).
        db.execute("PRAGMA journal_mode=MEMORY")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("PRAGMA cache_size=-65536")  # 64 MiB: a batch's keys touch pages all over the B-tree
        db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        return db

    def close(self) -> None:
        self._db.close()

    # -- what it describes ---------------------------------------------------------------------

    def describes(self, table: Table) -> bool:
        """Whether the index holds exactly the table's current snapshot."""
        return self._meta() == _identity(table, self.key_columns)

    def _meta(self) -> dict[str, str]:
        try:
            return dict(self._db.execute("SELECT name, value FROM meta").fetchall())
        except sqlite3.DatabaseError:  # a file left damaged by a crash: it describes nothing
            return {}

    # -- building -------------------------------------------------------------------------------

    def rebuild(self, table: Table) -> None:
        """Index every live row of the table's current snapshot (reads every data file's keys)."""
        started = time.monotonic()
        schema = table.schema()
        integer = _integer_key(table, self.key_columns)
        self._db.close()
        self._remove_files()  # a new file: the old one may be in any state
        self._db = self._open()
        with self._transaction():
            self._db.execute(
                "CREATE TABLE files (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, "
                "live INTEGER NOT NULL)"
            )
            self._db.execute(
                "CREATE TABLE keys (key INTEGER PRIMARY KEY, file INTEGER NOT NULL, pos INTEGER NOT NULL)"
                if integer
                else "CREATE TABLE keys (key BLOB PRIMARY KEY, file INTEGER NOT NULL, pos INTEGER NOT NULL) "
                "WITHOUT ROWID"
            )
            self._integer = integer
            rows = 0
            if table.current_snapshot() is not None:
                key_schema = schema.select(*self.key_columns)
                for task in table.scan().plan_files():
                    keys = ArrowScan(table.metadata, table.io, key_schema, AlwaysTrue()).to_table(
                        tasks=[FileScanTask(task.file)]
                    )
                    live = _live_positions(table, task, keys.num_rows)
                    keys = keys.select(self.key_columns)
                    rows += self._add(task.file.file_path, keys if live is None else keys.take(live), live)
        self._describe(_identity(table, self.key_columns))
        log.info(
            "indexed the keys of %s: %d rows in %.2f s (%s)",
            table.name(),
            rows,
            time.monotonic() - started,
            self.path,
        )

    def _add(
        self, path: str, keys: pa.Table, positions: pa.Array | None = None, moved: bool = False,
        replace: bool = False,
    ) -> int:  # fmt: skip
        """Record ``keys`` as rows of ``path``, at ``positions`` (None: 0, 1, 2, … — the file's
        rows in order); ``moved``: the keys were elsewhere (a compaction rewrote their file);
        ``replace``: the keys' records may still point at the rows these replace."""
        if keys.num_rows == 0:
            return 0
        file = self._file_id(path)
        where = range(keys.num_rows) if positions is None else positions.to_pylist()
        try:
            self._db.executemany(
                f"INSERT {'OR REPLACE ' if moved or replace else ''}INTO keys VALUES (?, ?, ?)",
                zip(self._encode(keys), [file] * keys.num_rows, where, strict=True),
            )
            self._db.execute("UPDATE files SET live = live + ? WHERE id = ?", (keys.num_rows, file))
        except sqlite3.IntegrityError:
            raise KeyIndexError(
                f"Cannot index the keys ({', '.join(self.key_columns)}) of the sink table: a key is in two "
                f"live rows (one in {path}). The table no longer equals its source. Fix: re-snapshot the "
                "table (`binlake plan --replan`, `binlake snapshot`)."
            ) from None
        return int(keys.num_rows)

    def _file_id(self, path: str) -> int:
        self._db.execute("INSERT OR IGNORE INTO files (path, live) VALUES (?, 0)", (path,))
        row = self._db.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
        return int(row[0])

    # -- a batch --------------------------------------------------------------------------------

    def positions(self, keys: pa.Table) -> dict[str, list[int]]:
        """Data file → sorted positions of the stored rows of ``keys`` (keys not stored: absent)."""
        found: dict[str, list[int]] = {}
        encoded = self._encode(keys.select(self.key_columns))
        for low in range(0, len(encoded), _STEP):
            part = encoded[low : low + _STEP]
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT f.path, k.pos FROM keys k JOIN files f ON f.id = k.file WHERE k.key IN ({marks})",
                part,
            ).fetchall()
            for path, pos in rows:
                found.setdefault(path, []).append(int(pos))
        return {path: sorted(p) for path, p in found.items()}

    def apply(
        self,
        table: Table,
        keys: pa.Table,
        added: Sequence[str],
        before: int | None,
        replaced: dict[str, int] | None = None,
    ) -> None:
        """After a commit that replaced the rows of ``keys`` and added the files ``added``: the
        index now describes the table's new snapshot, if it described ``before`` (the snapshot the
        batch was merged on); else it is left to be rebuilt. ``replaced``: rows per file that
        ``positions(keys)`` found for the commit (saves looking the keys up again)."""
        identity = _identity(table, self.key_columns)
        meta = self._meta()
        if meta.get("snapshot") != str(before) or meta.get("boot") != _boot():
            return
        schema = table.schema().select(*self.key_columns).as_arrow()
        new = [
            (p, pq.read_table(table.io.new_input(p).open(), columns=self.key_columns).cast(schema))
            for p in added
        ]
        self.forget()
        with self._transaction():
            encoded = sorted(self._encode(keys.select(self.key_columns)))  # B-tree order: fewer page visits
            fresh = [k for _, data in new for k in self._encode(data)]
            batch, rewritten = set(encoded), set(fresh)
            if replaced is not None and len(rewritten) == len(fresh) and rewritten <= batch:
                # Each key is looked up once more, not twice: the counts are known, and a new row
                # of a key replaces its record in place; only the deleted keys are removed.
                decrements = [(n, path) for path, n in replaced.items()]
                self._db.executemany("UPDATE files SET live = live - ? WHERE path = ?", decrements)
                self._remove(sorted(batch - rewritten))
                for path, data in new:
                    self._add(path, data, replace=True)
            else:
                self._remove(encoded, count=True)
                for path, data in new:
                    self._add(path, data)
        self._describe(identity)

    def _remove(self, encoded: list[Any], count: bool = False) -> None:
        """Remove these keys' records (``count``: and take them off their files' live rows)."""
        for low in range(0, len(encoded), _STEP):
            part = encoded[low : low + _STEP]
            marks = ",".join("?" * len(part))
            if count:
                gone = self._db.execute(
                    f"SELECT file, COUNT(*) FROM keys WHERE key IN ({marks}) GROUP BY file", part
                ).fetchall()
                decrements = [(n, file) for file, n in gone]
                self._db.executemany("UPDATE files SET live = live - ? WHERE id = ?", decrements)
            self._db.execute(f"DELETE FROM keys WHERE key IN ({marks})", part)

    def moved(self, table: Table, removed: Sequence[str], added: Sequence[str], before: int | None) -> None:
        """After a commit that rewrote the files ``removed`` (their live rows) into ``added``: the
        keys point into the new files, and the index describes the new snapshot (if it described
        ``before``)."""
        identity = _identity(table, self.key_columns)
        meta = self._meta()
        if meta.get("snapshot") != str(before) or meta.get("boot") != _boot():
            return
        schema = table.schema().select(*self.key_columns)
        self.forget()
        with self._transaction():
            for path in added:
                data = pq.read_table(table.io.new_input(path).open(), columns=self.key_columns)
                self._add(path, data.cast(schema.as_arrow()), moved=True)
            self._db.executemany("DELETE FROM files WHERE path = ?", [(path,) for path in removed])
        self._describe(identity)

    def live_rows(self) -> dict[str, int]:
        """Data file → rows of it the index holds (its rows no delete removed)."""
        return {path: int(live) for path, live in self._db.execute("SELECT path, live FROM files")}

    def forget(self) -> None:
        """The table changed in a way not recorded here: rebuild before the next use."""
        self._db.execute("DELETE FROM meta")

    # -- helpers --------------------------------------------------------------------------------

    def _describe(self, values: dict[str, str]) -> None:
        """Record what the index now holds — the last write of an update, in a commit of its own."""
        boot = _boot()
        if boot == "":
            # No boot id to tell a machine crash by: the keys reach the disk before the record does.
            with self.path.open("rb+") as file:
                os.fsync(file.fileno())
        with self._transaction():
            self._db.execute("DELETE FROM meta")
            self._db.executemany("INSERT INTO meta VALUES (?, ?)", {**values, "boot": boot}.items())

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _encode(self, keys: pa.Table) -> list[Any]:
        """Keys as SQLite values: integers as they are (one integer key column), else one blob
        per row (its values' text, columns apart: equal keys give equal blobs)."""
        if self._integer is None:
            self._integer = self._meta().get("integer") == "1"
        if self._integer:
            return list(keys.column(0).to_pylist())
        columns = [keys.column(name).to_pylist() for name in self.key_columns]
        return [repr(values).encode() for values in zip(*columns, strict=True)]


def _identity(table: Table, key_columns: Sequence[str]) -> dict[str, str]:
    snapshot = table.current_snapshot()
    return {
        "boot": _boot(),
        "format": FORMAT,
        "table": str(table.metadata.table_uuid),
        "snapshot": str(snapshot.snapshot_id if snapshot is not None else None),
        "keys": ",".join(key_columns),
        "integer": "1" if _integer_key(table, key_columns) else "0",
    }


@functools.cache
def _boot() -> str:
    """This boot of the machine (Linux), or "" where the system does not say."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _integer_key(table: Table, key_columns: Sequence[str]) -> bool:
    if len(key_columns) != 1:
        return False
    return bool(pa.types.is_integer(table.schema().select(key_columns[0]).as_arrow().field(0).type))


def _live_positions(table: Table, task: FileScanTask, rows: int) -> pa.Array | None:
    """Positions of the file's rows no position delete removes (None: all of them)."""
    deleted: list[pa.Array] = []
    for delete in task.delete_files:
        if delete.content != DataFileContent.POSITION_DELETES:
            raise KeyIndexError(
                f"Cannot index the keys of {table.name()}: its file {task.file.file_path} has equality "
                "deletes (binlake never writes them; another writer did). Fix: rewrite the table's files "
                "(`binlake maintain`) or set `write.merge.mode` to copy-on-write."
            )
        found = pq.read_table(table.io.new_input(delete.file_path).open(), columns=["file_path", "pos"])
        mine = found.filter(pc.equal(found.column("file_path"), task.file.file_path))
        deleted.append(mine.column("pos").combine_chunks())
    if not deleted or not any(len(d) for d in deleted):
        return None
    gone = pa.concat_arrays(deleted)
    everything = pa.array(range(rows), pa.int64())
    return everything.filter(pc.invert(pc.is_in(everything, gone)))
