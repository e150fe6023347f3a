"""Copy-on-write commits: the data files holding changed rows are replaced by their kept rows,
written together with the batch's new rows in key order."""

from __future__ import annotations

import itertools
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import FileIO
from pyiceberg.table import FileScanTask, Transaction

from binlake.sink.pyiceberg_internals import write_data_files


def overwrite(
    tx: Transaction,
    io: FileIO,
    properties: dict[str, str],
    rewrites: list[tuple[FileScanTask, pa.Table]],
    new_rows: pa.Table | None,
    order: list[tuple[str, str]] | None = None,
) -> None:
    """One copy-on-write commit: the rewritten files replaced by their kept rows, plus new rows.

    Neighbouring pieces are written together up to ``COALESCE_BYTES``: a stream's batches would
    otherwise leave one more small file per table each time (its new keys), and every later merge
    pays per file. Bounded, so a file the stream keeps rewriting stays small.
    """
    if not rewrites and new_rows is None:
        return
    metadata = tx.table_metadata
    write_uuid, counter = uuid.uuid4(), itertools.count(0)
    pieces = [kept for _, kept in rewrites if kept.num_rows] + ([new_rows] if new_rows is not None else [])
    with tx.update_snapshot(snapshot_properties=properties).overwrite(commit_uuid=write_uuid) as snap:
        for task, _ in rewrites:
            snap.delete_data_file(task.file)
        for data in _coalesce(pieces, COALESCE_BYTES):
            if order and len(data.column_names):
                data = _in_order(data, order)
            for data_file in write_data_files(metadata, data, io, write_uuid, counter):
                snap.append_data_file(data_file)


def _in_order(data: pa.Table, order: list[tuple[str, str]]) -> pa.Table:
    """``data`` sorted by ``order``, or ``data`` itself when it is in that order already: the new
    rows of keys beyond the table's (inserts in key order) usually are, and copying a catch-up
    batch's rows into the place they already had took 50-70 ms of its commit."""
    indices = pc.sort_indices(data, sort_keys=order)
    if bool((indices.to_numpy() == np.arange(len(indices))).all()):
        return data
    return data.take(indices)


#: Arrow bytes of rows a copy-on-write commit writes into one file at most when it coalesces.
COALESCE_BYTES = 64 * 1024 * 1024


def _coalesce(pieces: list[pa.Table], limit: int) -> list[pa.Table]:
    """Consecutive ``pieces`` concatenated into tables of at most ``limit`` bytes (a bigger piece
    stays alone)."""
    groups: list[list[pa.Table]] = []
    size = 0
    for piece in pieces:
        if groups and size + piece.nbytes <= limit:
            groups[-1].append(piece)
            size += piece.nbytes
        else:
            groups.append([piece])
            size = piece.nbytes
    return [g[0] if len(g) == 1 else pa.concat_tables([t.cast(g[0].schema) for t in g]) for g in groups]
