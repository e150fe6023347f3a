"""Every use of pyiceberg's private API, behind a small surface the rest of the sink calls.

pyiceberg 0.12 writes data files only through ``Table.append``/``overwrite`` (whole Arrow tables,
its own commit) and cannot write delete files. binlake needs both inside its own transactions, so
it relies on these internals (pinned in ``pyproject.toml``; check them when upgrading):

- ``pyiceberg.io.pyarrow._dataframe_to_data_files``: Arrow rows → Parquet data files of a table;
- ``pyiceberg.table.update.snapshot._OverwriteFiles`` and its ``_manifests``,
  ``_existing_manifests``, ``_summary``, ``_snapshot_id``, ``_io``, ``_compression``: the overwrite
  snapshot producer ``DeltaOverwrite`` extends with delete files;
- ``pyiceberg.manifest.ManifestWriterV2._meta``: a manifest's declared content;
- ``pyiceberg.table.Transaction._table`` and ``_updates``: ``Transaction`` memoises the metadata
  its commit works on;
- ``pyiceberg.manifest.ManifestFile.fetch_manifest_entry`` is wrapped by ``cache_manifest_entries``
  (a manifest file never changes once written);
- ``share_table_metadata`` gives pyiceberg's snapshot and metadata-log models a ``__deepcopy__``
  and wraps ``pyiceberg.serializers.FromInputFile.table_metadata`` and
  ``ToOutputFile.table_metadata`` (a metadata file never changes once written either).
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.serializers import FromInputFile, ToOutputFile
from pyiceberg.table import Table
from pyiceberg.table import Transaction as _Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import MetadataLogEntry, Snapshot, SnapshotLogEntry, Summary
from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT

#: Manifest entries kept at most by ``cache_manifest_entries`` (a few hundred MB at the most).
CACHED_ENTRIES = 200_000
_CacheKey = tuple[str, int | None, int | None, int | None, bool]


class _ManifestEntries:
    """The entries of manifest files already read, least recently used dropped first.

    Every plan of a table (a batch's merge finds the files holding its keys; its overwrite finds
    the entries it deletes; compaction; scans) reads every manifest of the current snapshot again,
    and a streamed table gains one per commit. Manifests are immutable once written, so their
    entries can be kept: a copy-on-write batch of 60 changes into a 3k-row table took 0.134 s,
    0.050 s with them kept (two plans per commit, most of it reading manifests). Keyed by what
    pyiceberg's sequence-number inheritance reads too, so an entry is exactly what a read gives.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.hits = 0
        self._entries: OrderedDict[_CacheKey, tuple[ManifestEntry, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self._read = ManifestFile.fetch_manifest_entry

    def fetch(self, manifest: ManifestFile, io: FileIO, discard_deleted: bool = True) -> list[ManifestEntry]:
        key = (
            manifest.manifest_path, manifest.added_snapshot_id, manifest.sequence_number,
            manifest.min_sequence_number, discard_deleted,
        )  # fmt: skip
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return list(found)  # callers may change the list, not the entries
        entries = self._read(manifest, io, discard_deleted)
        with self._lock:
            if key not in self._entries and len(entries) <= self.limit:
                self._entries[key] = tuple(entries)
                self.size += len(entries)
                while self.size > self.limit:
                    _, dropped = self._entries.popitem(last=False)
                    self.size -= len(dropped)
        return entries


_cache: _ManifestEntries | None = None


def cache_manifest_entries(limit: int = CACHED_ENTRIES) -> _ManifestEntries:
    """Keep the entries of the manifests this process reads (once per process; see
    ``_ManifestEntries``)."""
    global _cache
    if _cache is None:
        cache = _ManifestEntries(limit)

        def fetch(manifest: ManifestFile, io: FileIO, discard_deleted: bool = True) -> list[ManifestEntry]:
            return cache.fetch(manifest, io, discard_deleted)

        ManifestFile.fetch_manifest_entry = fetch  # type: ignore[method-assign, assignment]
        _cache = cache
    return _cache


#: Parsed metadata files kept by ``share_table_metadata`` (each a few MB at the most).
CACHED_METADATA = 16
_metadata: OrderedDict[str, TableMetadata] | None = None


def share_table_metadata() -> None:
    """Treat a table's metadata as the immutable value it is (once per process).

    Every commit through a catalog loads the table's current metadata file (parsing every snapshot
    it keeps, with its summary), applies the updates, deep-copies the result and writes it; a stream
    keeps ``stream.keep_snapshots`` (100), so each of those grows with them: ``bench/merge.py
    --batches 100 --trigger-s 2`` measured 15 ms more per batch in the last ten than in the first
    ten (0.04 s), most of it the deep copy and the parse. The models are frozen and pyiceberg's
    updates replace snapshots and log entries instead of changing them, so a deep copy of one is
    the model itself (as of a tuple); and a metadata file is never changed once written, so the
    metadata a commit wrote, or read, is kept by location and not parsed again.
    """
    global _metadata
    if _metadata is not None:
        return
    cache: OrderedDict[str, TableMetadata] = OrderedDict()
    lock = threading.Lock()
    read, write = FromInputFile.table_metadata, ToOutputFile.table_metadata

    def keep(location: str, metadata: TableMetadata) -> TableMetadata:
        with lock:
            cache[location] = metadata
            cache.move_to_end(location)
            while len(cache) > CACHED_METADATA:
                cache.popitem(last=False)
        return metadata

    def read_kept(input_file: Any, encoding: str = "utf-8") -> TableMetadata:
        with lock:
            found = cache.get(input_file.location)
        return found if found is not None else keep(input_file.location, read(input_file, encoding))

    def write_kept(metadata: TableMetadata, output_file: Any, overwrite: bool = False) -> None:
        write(metadata, output_file, overwrite)
        keep(output_file.location, metadata)

    for model in (Snapshot, MetadataLogEntry, SnapshotLogEntry):
        model.__deepcopy__ = _itself  # type: ignore[method-assign, assignment]
    FromInputFile.table_metadata = staticmethod(read_kept)  # type: ignore[method-assign]
    ToOutputFile.table_metadata = staticmethod(write_kept)  # type: ignore[method-assign]
    _metadata = cache


def _itself(model: Any, memo: dict[int, Any] | None = None) -> Any:
    return model


def cache_immutable_files() -> None:
    """Keep what this process reads of files Iceberg never changes once written: manifests'
    entries and tables' metadata (``cache_manifest_entries``, ``share_table_metadata``).

    binlake's one patch of pyiceberg, installed by name where a job starts (``spark/entry.py``,
    the CLI's data commands, the benchmarks); never as a side effect of opening a catalog or
    making a writer. Without it everything works the same, slower: every merge plans the table and
    every commit loads its metadata."""
    cache_manifest_entries()
    share_table_metadata()


def installed() -> bool:
    """Whether ``cache_immutable_files`` ran in this process."""
    return _cache is not None and _metadata is not None


def write_data_files(
    metadata: TableMetadata,
    rows: pa.Table,
    io: FileIO,
    write_uuid: uuid.UUID,
    counter: itertools.count[int],
    rewritten: Sequence[DataFile] = (),
) -> Iterable[DataFile]:
    """Parquet data files of the table holding ``rows`` (named from ``write_uuid`` and ``counter``;
    ``rewritten``: the files ``rows`` come from, if they are rewritten, see ``sized_on_disk``)."""
    return _dataframe_to_data_files(sized_on_disk(metadata, rows, rewritten), rows, io, write_uuid, counter)


def sized_on_disk(metadata: TableMetadata, rows: pa.Table, rewritten: Sequence[DataFile]) -> TableMetadata:
    """``metadata`` with a target file size that cuts ``rows`` into files of the target's size on
    disk, judged by the files they were read from.

    pyiceberg cuts files at ``write.target-file-size-bytes`` of their rows in memory (Arrow), which
    is several times their size as Parquet (4× for the stream benchmark's rows). Iceberg's own
    writers, binlake's snapshot and the compaction's choice of small files go by the size on disk:
    cut by pyiceberg's measure, every file a compaction writes is small again at once, and the next
    compactions rewrite it with every few batches' files — the whole table, again and again."""
    on_disk, stored = sum(f.file_size_in_bytes for f in rewritten), sum(f.record_count for f in rewritten)
    if not rows.num_rows or not on_disk or not stored:
        return metadata
    ratio = (rows.nbytes / rows.num_rows) / (on_disk / stored)
    if ratio <= 1.0:
        return metadata
    target = target_file_size(metadata.properties)
    properties = {**metadata.properties, TARGET_FILE_SIZE: str(int(target * ratio))}
    return metadata.model_copy(update={"properties": properties})


def target_file_size(properties: Mapping[str, str]) -> int:
    """A table's target size of a data file, by its ``properties``."""
    return int(properties.get(TARGET_FILE_SIZE, DEFAULT_TARGET_FILE_SIZE))


#: The table property of a data file's target size, and Iceberg's default for it.
TARGET_FILE_SIZE = "write.target-file-size-bytes"
DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024


class Transaction(_Transaction):
    """pyiceberg's transaction, computing the metadata it works on once per staged update.

    pyiceberg's ``table_metadata`` applies the staged updates to a deep copy of the table's
    metadata on every access, and one overwrite commit reads it about twenty times: with the
    snapshots a stream leaves (every one with its summary), that copying was half of a
    merge-on-read batch's commit after 100 batches (``bench/merge.py --growth``, 3.8 of 8 s over
    10 batches). The metadata models are frozen, so one copy serves until the updates change —
    and it need not be a deep copy at all: pyiceberg's updates build new lists and dicts instead of
    changing their base's (``model_copy(update=…)``), and this metadata only plans the transaction
    (the catalog computes what it writes from the updates itself). The deep copy grew with the
    snapshots kept: 29 ms each, two per commit, after 100 batches.
    """

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        self._memo: tuple[TableMetadata, tuple[Any, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        if self._memo is None or self._memo[0] is not base or self._memo[1] is not updates:
            context, metadata = _TableMetadataUpdateContext(), base
            for update in updates:
                metadata = _apply_table_update(update, metadata, context)
            self._memo = (base, updates, metadata)
        return self._memo[2]


def transaction(table: Table) -> Transaction:
    """A transaction on ``table`` (``with transaction(table) as tx:`` commits it, as pyiceberg's)."""
    return Transaction(table)


class DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class DeltaOverwrite(_OverwriteFiles):
    """pyiceberg's overwrite producer, plus delete files added and delete files retired."""

    def __init__(
        self,
        *args: Any,
        delete_files: Iterable[DataFile] = (),
        retired_delete_files: Iterable[str] = (),
        merge_manifests: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._added_delete_files = list(delete_files)
        self._retired = set(retired_delete_files)
        self._merge = merge_manifests
        """Carry the parent's manifests over as one manifest per content and partition spec."""
        self._retired_files: list[DataFile] = []
        """The retired delete files, as found in the manifests (for the summary)."""

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
        manifests = super()._existing_manifests()
        if self._merge:
            return self._merged(manifests)
        kept = []
        for manifest in manifests:
            if manifest.content != ManifestContent.DELETES or not self._retired:
                kept.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(io=self._io, discard_deleted=True)
            remaining = self._unretired(entries)
            if len(remaining) == len(entries):
                kept.append(manifest)
            elif remaining:
                kept.append(self._write(manifest.content, manifest.partition_spec_id, remaining))
        return kept

    def _merged(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        """``manifests`` as one manifest per content and partition spec, without the retired
        delete files: every growing with the commits would slow every later commit and scan."""
        groups: dict[tuple[ManifestContent, int], list[ManifestFile]] = {}
        for manifest in manifests:
            groups.setdefault((manifest.content, manifest.partition_spec_id), []).append(manifest)
        merged = []
        for (content, spec_id), group in groups.items():
            if len(group) == 1 and (content == ManifestContent.DATA or not self._retired):
                merged += group
                continue
            entries = [e for m in group for e in m.fetch_manifest_entry(io=self._io, discard_deleted=True)]
            if remaining := self._unretired(entries):
                merged.append(self._write(content, spec_id, remaining))
        return merged

    def _unretired(self, entries: list[ManifestEntry]) -> list[ManifestEntry]:
        """``entries`` without the retired delete files (noted for the summary)."""
        self._retired_files += [e.data_file for e in entries if e.data_file.file_path in self._retired]
        return [e for e in entries if e.data_file.file_path not in self._retired]

    def _write(self, content: ManifestContent, spec_id: int, entries: list[ManifestEntry]) -> ManifestFile:
        """A manifest of ``entries`` (live ones of committed manifests), kept as existing with their
        snapshot ids and sequence numbers: position deletes apply by data sequence number."""
        writer = (
            self._delete_manifest_writer(spec_id)
            if content == ManifestContent.DELETES
            else self.new_manifest_writer(self.spec(spec_id))
        )
        with writer:
            for entry in entries:
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.EXISTING,
                        snapshot_id=entry.snapshot_id,
                        sequence_number=entry.sequence_number,
                        file_sequence_number=entry.file_sequence_number,
                        data_file=entry.data_file,
                    )
                )
        return writer.to_manifest_file()

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        # pyiceberg counts only data files; count the delete files added and retired too, in the
        # batch's figures and in the table's totals, as Iceberg's summaries do (engines plan and
        # report from the totals).
        extra = summary.additional_properties
        added = ("added-files-size", "added-delete-files", "added-position-deletes")
        removed = ("removed-files-size", "removed-delete-files", "removed-position-deletes")
        for files, sign, names in ((self._added_delete_files, 1, added), (self._retired_files, -1, removed)):
            if not files:
                continue
            size, deletes = sum(f.file_size_in_bytes for f in files), sum(f.record_count for f in files)
            counts = (size, len(files), deletes)
            for name, count in zip(names, counts, strict=True):
                extra[name] = str(int(extra.get(name, 0)) + count)
            for total, count in zip(
                ("total-files-size", "total-delete-files", "total-position-deletes"), counts, strict=True
            ):
                if total in extra:  # pyiceberg leaves the totals out when the parent had none
                    extra[total] = str(max(0, int(extra[total]) + sign * count))
            if sign > 0:
                extra["added-position-delete-files"] = str(len(files))
        return summary

    def _delete_manifest_writer(self, spec_id: int) -> DeleteManifestWriter:
        return DeleteManifestWriter(
            spec=self.spec(spec_id),
            schema=self.schema(),
            output_file=self.new_manifest_output(),
            snapshot_id=self._snapshot_id,
            avro_compression=self._compression,
        )
