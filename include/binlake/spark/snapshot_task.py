"""One snapshot task, as it runs in a Spark Python worker: read a group of chunks, write Parquet.

Files go to ``<table location>/data/snapshot-<task>-t<k>-<n>.parquet`` (``k``: the table's place
among the task's, when small tables share a task) and roll at the target file size;
rows are buffered into row groups of ``ROW_GROUP_ROWS`` so readers get decent row groups even from
small chunks. Nothing here commits: a file that no commit adopts (a failed or retried task) is an
orphan that ``binlake maintain`` removes.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import time
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from binlake.config import SourceConfig
from binlake.config.tls import with_tls_key
from binlake.events import CreateTable, TableId, table_from_dict
from binlake.offsets import BinlogOffset
from binlake.schema.routes import with_source_table
from binlake.schema.type_mapping import arrow_schema
from binlake.sink.file_systems import file_system
from binlake.source.chunks.reader import ChunkReader
from binlake.source.chunks.splitter import Chunk, ChunkRange
from binlake.source.server.replicas import claimed_server_id
from binlake.state.codec import decode_key

if TYPE_CHECKING:
    from binlake.schema.transforms import Transform
    from binlake.sink.partition_files import Partitioning

log = logging.getLogger(__name__)

ROW_GROUP_ROWS = 128 * 1024
#: Column types written dictionary-encoded: few distinct values by definition. Other columns are
#: not — Arrow's dictionary attempt halves a snapshot's Parquet rate and, on columns of many values,
#: falls back to plain after paying for it; zstd finds the repeats either way (the demo shop's files
#: come out 19 % smaller without it).
DICTIONARY_TYPES = frozenset({"enum", "set"})


class RollingParquetWriter:
    """Parquet files of one table, rolled at ``target_size`` bytes, in a folder given as a URI;
    the columns ``dictionary`` names are dictionary-encoded."""

    def __init__(
        self, folder_uri: str, prefix: str, schema: pa.Schema, target_size: int, dictionary: list[str]
    ) -> None:
        self.filesystem, self.folder = file_system(folder_uri.rstrip("/"))
        self.scheme = folder_uri.split("://", 1)[0] + "://" if "://" in folder_uri else ""
        self.prefix = prefix
        self.schema = schema
        self.target_size = target_size
        self.dictionary = dictionary
        self.files: list[str] = []
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._writer: pq.ParquetWriter | None = None
        self._stream: Any = None

    def write(self, data: pa.Table) -> None:
        if data.num_rows:
            self._buffer.append(data)
            self._buffered += data.num_rows
        if self._buffered >= ROW_GROUP_ROWS:
            self._flush()

    def flush(self) -> None:
        """Write what is buffered (a row group) to the current file."""
        self._flush()

    def close(self) -> list[str]:
        """Write what is buffered and close the current file; returns every file written."""
        self._flush()
        self._roll()
        return self.files

    @property
    def buffered(self) -> int:
        return self._buffered

    def _flush(self) -> None:
        if not self._buffered:
            return
        if self._writer is None:
            path = f"{self.folder}/{self.prefix}-{len(self.files)}.parquet"
            self.filesystem.create_dir(self.folder, recursive=True)
            self._stream = self.filesystem.open_output_stream(path)
            self._writer = pq.ParquetWriter(
                self._stream, self.schema, compression="zstd", use_dictionary=self.dictionary
            )
            self.files.append(self.scheme + path)
        self._writer.write_table(pa.concat_tables(self._buffer), row_group_size=ROW_GROUP_ROWS)
        self._buffer, self._buffered = [], 0
        if self._stream.tell() >= self.target_size:
            self._roll()

    def _roll(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._stream.close()
            self._writer = self._stream = None


class PartitionedParquetWriter:
    """A partitioned table's files: one ``RollingParquetWriter`` per partition of its spec (every
    file of one partition, as Iceberg wants), the rows buffered across them bounded."""

    def __init__(
        self,
        folder_uri: str,
        prefix: str,
        schema: pa.Schema,
        target_size: int,
        dictionary: list[str],
        partitioning: Partitioning,
    ) -> None:
        self.folder_uri, self.prefix, self.schema, self.target_size = folder_uri, prefix, schema, target_size
        self.dictionary = dictionary
        self.partitioning = partitioning
        self._writers: dict[str, RollingParquetWriter] = {}

    def write(self, data: pa.Table) -> None:
        for path, rows in self.partitioning.split(data):
            writer = self._writers.get(path)
            if writer is None:
                prefix = f"{self.prefix}-p{len(self._writers)}"
                writer = RollingParquetWriter(
                    self.folder_uri, prefix, self.schema, self.target_size, self.dictionary
                )
                self._writers[path] = writer
            writer.write(rows)
        if sum(w.buffered for w in self._writers.values()) >= ROW_GROUP_ROWS:
            for writer in self._writers.values():  # many small partitions: memory stays bounded
                writer.flush()

    def close(self) -> list[str]:
        return [f for w in self._writers.values() for f in w.close()]


def run_task(options: dict[str, str], index: int, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Read the chunks of one group (consecutive chunks of one table, or small tables whole:
    ``snapshot.chunks.chunk_groups``) and write their rows; one summary row per chunk, naming the
    files its table's rows went to."""
    started = time.monotonic()
    data = {**json.loads(options["source"]), "password": options["password"]}
    with_tls_key(data, options)
    source = SourceConfig.model_validate(data)
    first, last = (int(x) for x in options["server_ids"].split("-"))
    tid = task_id(index)
    summaries: list[dict[str, Any]] = []
    # Concurrent readers need distinct replica ids, and Spark may run more tasks at once than the
    # range holds: each task claims one.
    files: dict[str, list[str]] = {}
    with claimed_server_id(source, first, last, index) as server_id:
        for k, table_specs in enumerate(_by_table(specs)):
            read, written = _read_table(options, source, server_id, f"snapshot-{tid}-t{k}", table_specs)
            summaries += read
            files.setdefault(table_specs[0]["table"], []).extend(written)
    for row in summaries:  # each row of a table names every file the task wrote of it
        row.update(
            task=tid, files=json.dumps(files[row["table"]]), seconds=elapsed(started), max_rss_kb=max_rss_kb()
        )
    return summaries


def _by_table(specs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A group's chunks, table by table (a table's chunks are consecutive in its group); a table's
    last chunk, which heads its group, apart from the chunks after it (a file of its own, so each
    file holds one range of keys in order)."""
    runs: list[list[dict[str, Any]]] = []
    for spec in specs:
        if runs and runs[-1][0]["table"] == spec["table"] and runs[-1][0]["end"] is not None:
            runs[-1].append(spec)
        else:
            runs.append([spec])
    return runs


def _read_table(
    options: dict[str, str], source: SourceConfig, server_id: int, prefix: str, specs: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Read chunks of one table into its files (``prefix``: their names' start, unique to the task
    and the run: routed tables share a folder); their summary rows, and the files."""
    tables = json.loads(options["tables"])
    locations = json.loads(options["locations"])
    table_name = specs[0]["table"]
    schema = table_from_dict(tables[table_name])
    routed = table_name in json.loads(options.get("routed", "[]"))
    summaries: list[dict[str, Any]] = []
    rule = json.loads(options.get("transforms", "{}")).get(table_name)
    transform = None if rule is None else _transform(rule, schema)
    with ChunkReader(source, schema, server_id) as reader:
        file_schema = reader.converter.schema
        if transform is not None:  # the projection's columns (computed ones typed by their expression)
            file_schema = arrow_schema(transform.sink)
        projected = file_schema
        if routed:  # a shared sink table: each row names its source table
            file_schema = with_source_table(schema.table, file_schema.empty_table()).schema
        soft = table_name in json.loads(options.get("soft_delete", "[]"))
        if soft:  # the rows read are live (``sink/history/soft_delete.py``)
            file_schema = _marked_live(file_schema.empty_table()).schema
        # Kept without an upsert table: the rows as its changelog's or history's (reads, current
        # versions: ``sink/history/state_table.py``), at their chunk's high watermark.
        shape = json.loads(options.get("shapes", "{}")).get(table_name)
        if shape is not None:
            file_schema = _shaped(shape, file_schema.empty_table(), 0, BinlogOffset("_.000000", 4)).schema
        # A backfill stages its files apart from the table's data (``folder``): the stream reads
        # them, and orphan removal (which sweeps ``data/``) leaves them alone until then.
        folder = locations[table_name] + "/" + options.get("folder", "data")
        target = int(options["target_file_size"])
        partitioning = json.loads(options.get("partitioning", "{}")).get(table_name)
        dictionary = [c.name for c in schema.columns if c.data_type in DICTIONARY_TYPES]
        dictionary = [name for name in dictionary if name in file_schema.names]
        writer: RollingParquetWriter | PartitionedParquetWriter = (
            RollingParquetWriter(folder, prefix, file_schema, target, dictionary)
            if partitioning is None
            else PartitionedParquetWriter(
                folder,
                prefix,
                file_schema,
                target,
                dictionary,
                _partitioning(partitioning),
            )
        )
        for spec in specs:
            chunk = Chunk(
                TableId.parse(spec["table"]),
                int(spec["id"]),
                spec["key"],
                ChunkRange(decode_key(spec["start"]), decode_key(spec["end"])),
            )
            result = reader.read(chunk)
            data = result.data
            if transform is not None:  # the rows the filter keeps, projected (``schema.transforms``)
                data = transform.project(data.filter(transform.keep(data))).cast(projected)
            data = with_source_table(schema.table, data) if routed else data
            data = _marked_live(data) if soft else data
            writer.write(_shaped(shape, data, int(time.time()), result.high) if shape is not None else data)
            summaries.append(
                {
                    "chunk_id": str(chunk.id),
                    "table": table_name,
                    "low": json.dumps(result.low.to_dict()),
                    "high": json.dumps(result.high.to_dict()),
                    "rows": result.row_count,
                }
            )
        files = writer.close()
        # Once a task, not once a chunk (a discovery costs about as much as reading 3,000 rows):
        # a statement between two of its chunk reads is found in the binlog before the switch
        # (``snapshot/rereads.straddled``); this finds the schema the task's last read did not see.
        reader.check_schema(chunk, result.high)
    log.info("%s: %d chunks of %s read into %d files", prefix, len(specs), table_name, len(files))
    return summaries, files


def _transform(rule: dict[str, Any], schema: CreateTable) -> Transform:
    # Imported here: sqlglot is a tenth of a second of every task worker's start (the workers'
    # daemon imports this module before it forks them), and most tables have no transform.
    from binlake.schema.transforms import TransformSpec, compile_transform

    return compile_transform(TransformSpec(**{**rule, "description": rule.get("description") or ""}), schema)


def task_id(index: int) -> str:
    """A unique id for one attempt of one task (a retried task writes new files)."""
    return f"{index}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def max_rss_kb() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def elapsed(started: float) -> float:
    return round(time.monotonic() - started, 3)


# Imported where used: these modules bring pyiceberg's readers, which a chunk of a table without
# partitions or soft deletes need not wait for (the first chunk of a snapshot waits for its imports).


def _marked_live(data: pa.Table) -> pa.Table:
    from binlake.sink.history.soft_delete import marked_live

    return marked_live(data)


def _shaped(kind: str, data: pa.Table, event_time: int, at: BinlogOffset) -> pa.Table:
    from binlake.sink.history.state_table import shaped_reads

    return shaped_reads(kind, data, event_time, at)  # type: ignore[arg-type]


def _partitioning(text: str) -> Partitioning:
    from binlake.sink.partition_files import Partitioning

    return Partitioning.from_json(text)
