"""Files written outside pyiceberg (the snapshot's Spark tasks) into a partitioned table.

A snapshot task splits each chunk's rows by the table's partition spec (``split``, pyiceberg's
own partitioning of Arrow rows, so a row lands where a merge would put it) and writes every
partition to files of its own. The driver then adds those files; pyiceberg's ``add_files`` infers
a file's partition from its column bounds, which it cannot for ``bucket`` (not order-preserving)
and gets wrong when text bounds are truncated — so ``data_files`` takes the partition from the
file's first row instead (every row of such a file shares it).

pyiceberg internals used (see ``sink/pyiceberg_internals.py``): ``_determine_partitions``,
``data_file_statistics_from_parquet_metadata``, ``compute_statistics_plan``,
``parquet_path_to_id_mapping``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    _determine_partitions,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record


class Partitioning:
    """A table's current partition spec and schema, carried to the tasks as text."""

    def __init__(self, spec: PartitionSpec, schema: Schema) -> None:
        self.spec = spec
        self.schema = schema

    @classmethod
    def of(cls, metadata: TableMetadata) -> Partitioning | None:
        """None for an unpartitioned table."""
        spec = metadata.spec()
        return cls(spec, metadata.schema()) if spec.fields else None

    def to_json(self) -> str:
        return json.dumps({"spec": self.spec.model_dump_json(), "schema": self.schema.model_dump_json()})

    @classmethod
    def from_json(cls, text: str) -> Partitioning:
        data = json.loads(text)
        return cls(
            PartitionSpec.model_validate_json(data["spec"]), Schema.model_validate_json(data["schema"])
        )

    def split(self, rows: pa.Table) -> Iterator[tuple[str, pa.Table]]:
        """``rows`` by partition: (the partition's path, its rows)."""
        for part in _determine_partitions(self.spec, self.schema, rows):
            yield part.partition_key.to_path(), part.arrow_table_partition

    def partition(self, rows: pa.Table) -> Record:
        """The partition of ``rows`` (all of one partition)."""
        parts = list(_determine_partitions(self.spec, self.schema, rows))
        if len(parts) != 1:
            raise ValueError(f"rows of {len(parts)} partitions where one was expected")
        return parts[0].partition_key.partition


def add_files(tx: Transaction, table: Table, files: Sequence[str], summary: dict[str, str]) -> None:
    """Stage one append of the snapshot's ``files`` (with ``summary`` in its snapshot)."""
    if not table.spec().fields:
        tx.add_files(list(files), snapshot_properties=summary)
        return
    if tx.table_metadata.name_mapping() is None:  # the files carry no field ids: as add_files does
        mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
    with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
        for data_file in data_files(table.io, tx.table_metadata, files):
            append.append_data_file(data_file)


def data_files(io: FileIO, metadata: TableMetadata, paths: Sequence[str]) -> list[DataFile]:
    """The ``DataFile`` entries of Parquet files each holding rows of one partition of the
    table's current spec (as the snapshot's tasks write them)."""
    partitioning = Partitioning.of(metadata)
    schema = metadata.schema()
    found = []
    for path in paths:
        source = io.new_input(path)
        with source.open() as stream:
            parquet = pq.ParquetFile(stream)
            statistics = data_file_statistics_from_parquet_metadata(
                parquet_metadata=parquet.metadata,
                stats_columns=compute_statistics_plan(schema, metadata.properties),
                parquet_column_mapping=parquet_path_to_id_mapping(schema),
            )
            partition = Record()
            if partitioning is not None and parquet.metadata.num_rows:
                partition = partitioning.partition(_first_row(parquet, partitioning))
        found.append(
            DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=path,
                file_format=FileFormat.PARQUET,
                partition=partition,
                file_size_in_bytes=len(source),
                sort_order_id=None,
                spec_id=metadata.default_spec_id,
                equality_ids=None,
                key_metadata=None,
                **statistics.to_serialized_dict(),
            )
        )
    return found


def _first_row(parquet: Any, partitioning: Partitioning) -> pa.Table:
    """The partition source columns of the file's first row."""
    columns = sorted(
        {partitioning.schema.find_column_name(f.source_id) or "" for f in partitioning.spec.fields}
    )
    return parquet.read_row_group(0, columns=columns).slice(0, 1)
