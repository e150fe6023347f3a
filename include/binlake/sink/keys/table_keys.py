"""A sink table's keys as its data files hold them: each file's key columns, and the positions of
its rows no position delete removes (what the key index, ``sink/keys/key_index.py``, is built from).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFileContent
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table

from binlake.errors import BinlakeError


class KeyIndexError(BinlakeError):
    """The table cannot be indexed by key as it is."""


def live_keys(table: Table, task: FileScanTask, key_schema: Schema) -> tuple[pa.Table, np.ndarray]:
    """The keys (``key_schema``) of the live rows of ``task``'s data file, and their positions."""
    data = ArrowScan(table.metadata, table.io, key_schema, AlwaysTrue()).to_table(
        tasks=[FileScanTask(task.file)]
    )
    live = live_positions(table, task, data.num_rows)
    if live is None:
        return data, np.arange(data.num_rows, dtype=np.int64)
    return data.take(pa.array(live)), live


def live_positions(table: Table, task: FileScanTask, rows: int) -> np.ndarray | None:
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
    gone = np.asarray(pa.concat_arrays(deleted).to_numpy(zero_copy_only=False), np.int64)
    everything = np.arange(rows, dtype=np.int64)
    return everything[~np.isin(everything, gone)]


def deleted_positions(table: Table, tasks: list[FileScanTask]) -> dict[str, np.ndarray]:
    """Each task's data file's positions that the task's position deletes remove (files with none
    are left out), reading every delete file once (a merge-on-read table's delete files each name
    rows of many data files)."""
    read: dict[str, tuple[dict[str, int], np.ndarray, np.ndarray]] = {}
    found: dict[str, np.ndarray] = {}
    for task in tasks:
        parts = []
        for delete in task.delete_files:
            if delete.content != DataFileContent.POSITION_DELETES:
                raise KeyIndexError(
                    f"Cannot read the live rows of {table.name()} by position: its delete file "
                    f"{delete.file_path} holds equality deletes (binlake never writes them; another writer "
                    "did). Fix: rewrite the table's files (`binlake maintain`) or set `write.merge.mode` "
                    "to copy-on-write."
                )
            if delete.file_path not in read:
                read[delete.file_path] = _read_deletes(table, delete.file_path)
            codes, files, positions = read[delete.file_path]
            code = codes.get(task.file.file_path)
            if code is not None:
                parts.append(positions[files == code])
        if parts:
            found[task.file.file_path] = np.concatenate(parts)
    return found


def _read_deletes(table: Table, path: str) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
    """A position delete file: its data files' codes, each row's code, each row's position."""
    rows = pq.read_table(
        table.io.new_input(path).open(), columns=["file_path", "pos"], read_dictionary=["file_path"]
    )
    files = rows.column("file_path").combine_chunks()
    if not isinstance(files, pa.DictionaryArray):  # no rows, or written without a dictionary
        files = files.dictionary_encode()
    codes = {name: i for i, name in enumerate(files.dictionary.to_pylist())}
    indices = np.asarray(files.indices.to_numpy(zero_copy_only=False), np.int64)
    return codes, indices, np.asarray(rows.column("pos").to_numpy(zero_copy_only=False), np.int64)


def file_keys(table: Table, path: str, key_schema: Schema) -> pa.Table:
    """The key columns of the data file ``path``, named as the table names them. A file names its
    columns its own way (pyiceberg writes ``Nr. %d`` as ``Nr_x2E_x20_x25d``), so they are found
    by field id, else by name (a file added without ids reads through the name mapping's names)."""
    fields = list(key_schema.fields)
    with table.io.new_input(path).open() as stream:
        found = pq.ParquetFile(stream)
        by_id = {
            int(f.metadata[b"PARQUET:field_id"]): f.name
            for f in found.schema_arrow
            if f.metadata and b"PARQUET:field_id" in f.metadata
        }
        data = found.read(columns=[by_id.get(f.field_id, f.name) for f in fields])
    return data.rename_columns([f.name for f in fields])
