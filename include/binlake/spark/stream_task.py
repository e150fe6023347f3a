"""One task of the stream: decode a binlog segment of the captured tables into record batches.

Runs in a Spark Python worker. The worker gets the tables' schemas in force in its segment with the
segment (from the schema history), so it never asks the source for them; ``BinlogReader`` decodes
(python-mysql-replication's events; binlake's column decoder, or its row decoder for tables of
other types), ``RecordBuilder`` packs the rows for the driver.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import TableId, table_from_dict
from binlake.offsets import BinlogOffset
from binlake.schema.table_rules import table_rules
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.binlog.xa import PreparedXa, Xid
from binlake.source.server.replicas import claimed_server_id
from binlake.stream.positions import segment_ids
from binlake.stream.records import RecordBuilder

#: Rows per record batch handed to Spark.
BATCH_ROWS = 8192


class ZeroDateError(BinlakeError):
    """A change holds a zero date and the pipeline refuses them."""


def read_segment(
    config: PipelineConfig,
    index: int,
    start: dict[str, Any],
    end: dict[str, Any],
    schemas: str,
    prepares: str = "[]",
    held: str = "{}",
) -> Iterator[pa.RecordBatch]:
    """The changes of the captured tables in (start, end], then the segment's closing row.

    ``schemas``: the tables' schemas in force in the range (JSON), from the schema history;
    ``prepares``: XA prepares the planning side knows for commits in the batch (JSON);
    ``held``: per table, the offset up to which the snapshot holds its rows (JSON).
    """
    source = config.source
    tables = {TableId.parse(name): table_from_dict(data) for name, data in json.loads(schemas).items()}
    finish = BinlogOffset(str(end["file"]), int(end["pos"]))
    # a changelog shows before images, soft deletes keep them
    whole = frozenset(t for t in tables if table_rules(config, t).whole_images)
    builder = RecordBuilder(tables.values(), dict(source.chunk_key_columns), whole)
    if not tables:  # every captured table was dropped: only the segment's end to report
        builder.segment(finish, 0)
        yield builder.batch()
        return
    converters = {table: RowConverter(schema) for table, schema in tables.items()}
    # A snapshot's chunk readers, in a job of their own, claim their ids from the same range.
    with claimed_server_id(source, *segment_ids(source), index, wait=False) as server_id:
        reader = BinlogReader(
            source,
            server_id,
            BinlogOffset(str(start["file"]), int(start["pos"])),
            finish,
            set(tables),
            converters.__getitem__,
            lean=True,
            whole=whole,
            columnar=config.stream.column_decoder,
            prepares=[_prepared(p) for p in json.loads(prepares)],
            held={TableId.parse(t): BinlogOffset.from_dict(o) for t, o in json.loads(held).items()},
        )
        yield from _without_gc(_batches(reader, builder))
    tail = builder.batch()  # decodes what waits (the column decoder counts zero dates as it does)
    if source.zero_dates == "reject":
        _refuse_zero_dates(converters, start, end)
    if tail.num_rows:
        yield tail
    builder.segment(finish, reader.last_timestamp)
    yield builder.batch()


def _prepared(data: dict[str, Any]) -> PreparedXa:
    start, end = data["start"], data["end"]
    return PreparedXa(
        Xid.parse(data["xid"]),
        BinlogOffset(str(start["file"]), int(start["pos"])),
        BinlogOffset(str(end["file"]), int(end["pos"])),
    )


def _batches(reader: BinlogReader, builder: RecordBuilder) -> Iterator[pa.RecordBatch]:
    for event in reader.events():
        builder.add(event, reader.gtid)
        if len(builder) >= BATCH_ROWS:
            yield builder.batch()


def _without_gc(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Decoding makes millions of short-lived tuples and no reference cycles; the cyclic collector
    would walk them again and again (a third of the task's time, measured), so it pauses while a
    batch is being decoded and runs as usual while Spark ships it."""
    while True:
        enabled = gc.isenabled()
        gc.disable()
        try:
            batch = next(batches, None)
        finally:
            if enabled:
                gc.enable()
        if batch is None:
            return
        yield batch


def _refuse_zero_dates(
    converters: dict[TableId, RowConverter], start: dict[str, Any], end: dict[str, Any]
) -> None:
    found = {str(t): c.zero_dates for t, c in converters.items() if c.zero_dates}
    if found:
        raise ZeroDateError(
            f"Changes between {start['file']}:{start['pos']} and {end['file']}:{end['pos']} hold zero "
            f"dates (rows by table: {found}) and `source.zero_dates` is `reject`. Fix: set "
            "`source.zero_dates: null` to read them as NULL, or correct the rows in the source."
        )
