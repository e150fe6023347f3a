"""Merge-on-read for pyiceberg: position-delete files, which pyiceberg 0.12 can read but not write.

A merge under ``write.merge.mode=merge-on-read`` leaves the data files as they are and records the
replaced rows as (file, position) pairs in a position-delete file (Iceberg v2); the new rows go to
a new data file. A batch that changes a few rows in every file then writes kilobytes instead of
rewriting the table. Readers (pyiceberg, and DuckDB or Spark through it) apply the deletes; the
cost moves to reads until ``binlake maintain`` rewrites the files and retires the delete files.

Three pieces pyiceberg lacks, kept small and in one place:

- ``DeleteManifestWriter``: pyiceberg's v2 manifest writer always declares content ``data``;
  delete files must sit in a manifest whose content is ``deletes``.
- ``write_position_deletes``: the delete file itself (``file_path``/``pos`` with their reserved
  field ids, sorted), and its ``DataFile`` entry.
- ``DeltaOverwrite``: pyiceberg's overwrite producer plus added delete files (in a delete
  manifest) and retired delete files (dropped from their manifests, e.g. after compaction).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT, Record

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


class DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


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


class DeltaOverwrite(_OverwriteFiles):
    """pyiceberg's overwrite producer, plus delete files added and delete files retired."""

    def __init__(
        self,
        *args: Any,
        delete_files: Iterable[DataFile] = (),
        retired_delete_files: Iterable[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._added_delete_files = list(delete_files)
        self._retired = set(retired_delete_files)

    def _manifests(self) -> list[ManifestFile]:
        manifests = super()._manifests()
        by_spec: dict[int, list[DataFile]] = {}
        for delete_file in self._added_delete_files:
            by_spec.setdefault(delete_file.spec_id, []).append(delete_file)
        for spec_id, files in by_spec.items():
            with self._delete_manifest_writer(spec_id) as writer:
                for delete_file in files:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=delete_file,
                        )
                    )
            manifests.append(writer.to_manifest_file())
        return manifests

    def _existing_manifests(self) -> list[ManifestFile]:
        kept = []
        for manifest in super()._existing_manifests():
            if manifest.content != ManifestContent.DELETES or not self._retired:
                kept.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(io=self._io, discard_deleted=True)
            remaining = [e for e in entries if e.data_file.file_path not in self._retired]
            if len(remaining) == len(entries):
                kept.append(manifest)
            elif remaining:
                with self._delete_manifest_writer(manifest.partition_spec_id) as writer:
                    for entry in remaining:
                        writer.add_entry(
                            ManifestEntry.from_args(
                                status=ManifestEntryStatus.EXISTING,
                                snapshot_id=entry.snapshot_id,
                                sequence_number=entry.sequence_number,
                                file_sequence_number=entry.file_sequence_number,
                                data_file=entry.data_file,
                            )
                        )
                kept.append(writer.to_manifest_file())
        return kept

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        if self._added_delete_files:
            # pyiceberg counts only data files; add the delete files, as Iceberg's summaries do.
            extra = summary.additional_properties
            size = sum(f.file_size_in_bytes for f in self._added_delete_files)
            deletes = sum(f.record_count for f in self._added_delete_files)
            extra["added-files-size"] = str(int(extra.get("added-files-size", 0)) + size)
            extra["added-delete-files"] = str(len(self._added_delete_files))
            extra["added-position-delete-files"] = str(len(self._added_delete_files))
            extra["added-position-deletes"] = str(deletes)
        return summary

    def _delete_manifest_writer(self, spec_id: int) -> DeleteManifestWriter:
        return DeleteManifestWriter(
            spec=self.spec(spec_id),
            schema=self.schema(),
            output_file=self.new_manifest_output(),
            snapshot_id=self._snapshot_id,
            avro_compression=self._compression,
        )
