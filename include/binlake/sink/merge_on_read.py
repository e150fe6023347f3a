"""Merge-on-read for pyiceberg: position-delete files, which pyiceberg 0.12 can read but not write.

A merge under ``write.merge.mode=merge-on-read`` leaves the data files as they are and records the
replaced rows as (file, position) pairs in a position-delete file (Iceberg v2); the new rows go to
a new data file. A batch that changes a few rows in every file then writes kilobytes instead of
rewriting the table. Readers (pyiceberg, and DuckDB or Spark through it) apply the deletes; the
cost moves to reads until ``binlake maintain`` rewrites the files and retires the delete files.

``write_position_deletes`` writes the delete file itself (``file_path``/``pos`` with their
reserved field ids, sorted) and its ``DataFile`` entry; ``pyiceberg_internals.DeltaOverwrite``
commits it (pyiceberg's overwrite producer plus delete manifests).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
)
from pyiceberg.table import FileScanTask, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation
from pyiceberg.typedef import Record

from binlake.schema.routes import SOURCE_TABLE_COLUMN
from binlake.sink.keys.file_bounds import files_to_merge
from binlake.sink.keys.row_match import ClearRange, clear_mask, key_positions
from binlake.sink.pyiceberg_internals import DeltaOverwrite

#: The table property (Iceberg's own) that turns merge-on-read on.
MERGE_MODE = "write.merge.mode"
MERGE_ON_READ = "merge-on-read"

# Reserved field ids of position-delete files (Iceberg spec, "Position Delete Files").
_FILE_PATH_ID = 2147483546
_POS_ID = 2147483545
POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field(
            "file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(_FILE_PATH_ID)}
        ),
        pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(_POS_ID)}),
    ]
)


def merge_on_read(metadata: TableMetadata) -> bool:
    return metadata.properties.get(MERGE_MODE) == MERGE_ON_READ and metadata.format_version >= 2


def write_position_deletes(
    io: Any,
    metadata: TableMetadata,
    deletes: Sequence[tuple[DataFile, Sequence[int]]],
) -> list[DataFile]:
    """One position-delete file per partition for the given (data file, row positions) pairs."""
    by_partition: dict[tuple[int, Any], list[tuple[DataFile, Sequence[int]]]] = {}
    for data_file, positions in deletes:
        if len(positions):
            by_partition.setdefault((data_file.spec_id, repr(data_file.partition)), []).append(
                (data_file, positions)
            )
    written = []
    for (spec_id, _), entries in by_partition.items():
        paths = [f.file_path for f, positions in entries for _ in positions]
        positions = [int(p) for _, ps in entries for p in ps]
        table = pa.table({"file_path": paths, "pos": positions}, schema=POSITION_DELETE_SCHEMA)
        table = table.sort_by([("file_path", "ascending"), ("pos", "ascending")])
        location = f"{metadata.location.rstrip('/')}/data/deletes-{uuid.uuid4().hex}.parquet"
        output = io.new_output(location)
        with output.create(overwrite=False) as stream:
            pq.write_table(table, stream, compression="zstd")
        delete_file = DataFile.from_args(
            content=DataFileContent.POSITION_DELETES,
            file_path=location,
            file_format=FileFormat.PARQUET,
            partition=entries[0][0].partition if entries[0][0].partition is not None else Record(),
            record_count=table.num_rows,
            file_size_in_bytes=len(io.new_input(location)),
            sort_order_id=None,
            spec_id=spec_id,
            equality_ids=None,
            key_metadata=None,
        )
        delete_file.spec_id = spec_id
        written.append(delete_file)
    return written


def commit_delta(
    tx: Transaction,
    io: Any,
    properties: dict[str, str],
    deletes: Sequence[DataFile],
    files: Sequence[DataFile],
) -> None:
    """Stage one overwrite snapshot adding the delete files and the data files (nothing when both
    are empty)."""
    if not deletes and not files:
        return
    with DeltaOverwrite(
        operation=Operation.OVERWRITE,
        transaction=tx,
        io=io,
        commit_uuid=uuid.uuid4(),
        snapshot_properties=properties,
        delete_files=list(deletes),
    ) as snap:
        for data_file in files:
            snap.append_data_file(data_file)


def scanned_positions(
    table: Table, metadata: TableMetadata, keys: pa.Table, key_columns: list[str], clear: Sequence[ClearRange]
) -> list[tuple[DataFile, list[int]]]:
    """Positions of the batch's keys (and of the rows in ``clear`` ranges), from the key columns
    of every file whose bounds may hold one (the way without a key index: it reads the table)."""
    wanted = list(dict.fromkeys([*key_columns, *(c.column for c in clear)]))
    if any(c.source_table for c in clear) and SOURCE_TABLE_COLUMN not in wanted:
        wanted.append(SOURCE_TABLE_COLUMN)
    key_schema = metadata.schema().select(*wanted)
    replaced = []
    for task, _, _ in files_to_merge(table, keys, key_columns, clear):
        # Read the file alone, without its delete files, so row numbers are file positions.
        stored = ArrowScan(metadata, table.io, key_schema, AlwaysTrue()).to_table(
            tasks=[FileScanTask(task.file)]
        )
        positions = key_positions(stored, keys, key_columns)
        if clear:
            cleared = pc.indices_nonzero(clear_mask(stored, clear)).to_pylist()
            positions = sorted(set(positions) | {int(i) for i in cleared})
        if positions:
            replaced.append((task.file, positions))
    return replaced
