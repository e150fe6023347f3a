"""The row count a sink table must have: the source's count at the sink's binlog offset.

The sink holds the source as of an offset O (the stream's, or the snapshot's chunks at their high
watermarks). The source's count is read now, between two binlog positions ``low`` and ``high``;
the row changes of the binlog after O say how the count moved since:

- changes in (O, ``low``] moved it by their net count ``n`` (insert +1, delete -1, an update 0, a key
  update -1 at the old key's chunk and +1 at the new one's), after the snapshot filter (a change a
  chunk already holds is in the sink already);
- changes in (``low``, ``high``] may or may not be in the count read (``i`` inserts, ``d`` deletes).

So the sink must hold between ``count - i - n`` and ``count + d - n`` rows: exactly ``count - n``
on a source that was quiet while it was counted, whatever it did since O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from binlake.config import PipelineConfig
from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.schema.table_rules import table_rules
from binlake.schema.transform_sql import filter_sql
from binlake.schema.transforms import transform_of
from binlake.schema.type_mapping import RowConverter, arrow_schema
from binlake.source.binlog.change_reader import BinlogReader, SchemaChangedError
from binlake.source.binlog.event_rows import UnreplicableChangeError
from binlake.source.binlog.scan import binary_logs, gtid_boundaries
from binlake.source.chunks.watermarks import LowWatermark, current_offset
from binlake.source.server.connection import connect, server_version
from binlake.state.offset_names import ANCHOR
from binlake.state.store import StateStore, StoredPlan
from binlake.stream.emit_filter import SnapshotFilter
from binlake.stream.records import ROW, images, key_columns, row_struct
from binlake.stream.segments import distance

#: Startup modes whose sink is a full copy of the source (a snapshot first).
FULL_COPY_MODES = ("initial", "snapshot")


@dataclass(frozen=True)
class RowCount:
    """The row count a sink table (or one source's share of it) must have."""

    minimum: int | None
    maximum: int | None
    """None, None: not checked (``note`` says why)."""
    note: str

    @property
    def checked(self) -> bool:
        return self.minimum is not None


def expected_rows(
    config: PipelineConfig,
    store: StateStore,
    schema: CreateTable,
    offset: BinlogOffset | None,
    plans: Sequence[StoredPlan],
) -> RowCount:
    """The count ``schema.table``'s rows in the sink must have, the sink being at ``offset``."""
    if config.source.startup_mode not in FULL_COPY_MODES:
        return RowCount(
            None,
            None,
            f"{schema.table}: not checked: with `startup_mode: {config.source.startup_mode}` the sink "
            "holds the changes since the stream's start, not the rows the source had before",
        )
    if offset is None:
        return RowCount(
            None,
            None,
            f"{schema.table}: not checked: the sink has no offset yet (the snapshot is unfinished)",
        )
    with contextlib.closing(connect(config.source)) as conn:
        version = server_version(conn)
        # The last offset the engine made visible: a commit in the binlog but not yet visible (a
        # semi-sync wait) is not in the count, so it must not count as a change before it.
        reader_id = config.quality.reader_server_id(config.source.server_id.end)
        low = LowWatermark(gtid_boundaries(config.source, reader_id)).read(conn, version)
        rule = table_rules(config, schema.table).transform
        kept = (  # the sink's rows only
            f" WHERE ({filter_sql(rule.filter, str(schema.table))})"
            if rule is not None and rule.filter
            else ""
        )
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {schema.table.quoted()}{kept}")
            count = int(cur.fetchone()[0])
        high = current_offset(conn, version)
        behind = distance(offset, high, dict(binary_logs(conn)))
    if behind > config.quality.max_scan_bytes:
        return RowCount(
            None,
            None,
            f"{schema.table}: not checked: the sink is {behind:,} bytes of binlog behind the source "
            f"(more than quality.max_scan_bytes = {config.quality.max_scan_bytes:,}); the source has "
            f"{count:,} rows",
        )
    try:
        net, inserts, deletes = _changes_since(config, store, schema, offset, low, high, plans)
    except SchemaChangedError:
        return RowCount(
            None, None, f"{schema.table}: not checked: its schema changed after the sink's offset {offset}"
        )
    except UnreplicableChangeError as e:
        return RowCount(
            None,
            None,
            f"{schema.table}: not checked: after the sink's offset {offset}, at {e.gap.offset}, the binlog "
            f"holds {e.gap.reason}",
        )
    minimum, maximum = count - inserts - net, count + deletes - net
    moving = "" if low == high else f" while {inserts} inserts and {deletes} deletes came in"
    return RowCount(
        minimum,
        maximum,
        f"{schema.table}: the source had {count:,} rows at {low}{moving}; net {net:+,} rows changed "
        f"after the sink's offset {offset}",
    )


def _changes_since(
    config: PipelineConfig,
    store: StateStore,
    schema: CreateTable,
    offset: BinlogOffset,
    low: BinlogOffset,
    high: BinlogOffset,
    plans: Sequence[StoredPlan],
) -> tuple[int, int, int]:
    """Net row count change in (offset, low], and inserts and deletes in (low, high]."""
    if high <= offset:
        return 0, 0, 0
    version = store.schema_history(config.pipeline.name).at(schema.table, offset)
    written = version.schema if version is not None and version.schema is not None else schema
    keys = key_columns(written, dict(config.source.chunk_key_columns))
    reader_id = config.quality.reader_server_id(config.source.server_id.end)
    transform = transform_of(table_rules(config, schema.table), written)
    # A filter decides by whole rows (an update may move a row out of it: a delete in the sink).
    kept = changes_after(
        config, store, written, offset, high, reader_id, plans, keys if transform is None else None
    )
    if transform is not None:
        kept = kept.filter(transform.keep(images(kept)))
    late = pc.greater(kept.column("at"), low.packed)
    before = kept.filter(pc.invert(late)).column("delta")
    after = kept.filter(late).column("delta").to_pylist()
    return int(pc.sum(before).as_py() or 0), after.count(1), after.count(-1)


def changes_after(
    config: PipelineConfig,
    store: StateStore,
    schema: CreateTable,
    start: BinlogOffset,
    end: BinlogOffset,
    server_id: int,
    plans: Sequence[StoredPlan],
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """``schema.table``'s row images in (start, end] that the sink does not hold yet (the snapshot
    filter drops what a chunk holds): ``at``, ``row`` (the image's ``columns``, all when None),
    ``delta`` (+1 an after image, -1 a before image).

    Raises:
        SchemaChangedError: the rows were written with other columns than ``schema``'s.
        UnreplicableChangeError: the range holds a change binlake cannot replay.
    """
    converter = RowConverter(schema)
    names = list(columns) if columns is not None else list(schema.column_names)
    picked = [schema.column_names.index(n) for n in names]
    at: list[int] = []
    images: list[tuple[object, ...]] = []
    deltas: list[int] = []
    if end > start:
        # Only the key columns wanted: before images of keyed tables need no more than their key.
        lean = columns is not None
        reader = BinlogReader(
            config.source, server_id, start, end, {schema.table}, lambda _: converter, lean=lean
        )
        for row in reader.rows():
            p = row.offset.packed
            for image, delta in ((row.before, -1), (row.after, 1)):
                if image is not None:
                    at.append(p)
                    images.append(tuple(image[i] for i in picked))
                    deltas.append(delta)
    fields = [f.with_nullable(True) for f in arrow_schema(schema, names)] if names else []
    changes = pa.table(
        {
            "at": pa.array(at, pa.int64()),
            ROW: row_struct(fields, images),
            "delta": pa.array(deltas, pa.int8()),
        }
    )
    mine = [p for p in plans if p.table == schema.table]
    if store.offsets(config.pipeline.name).load(ANCHOR) is not None:
        mine = []  # the chunks' watermarks are positions of an older binlog, all behind the sink
    return SnapshotFilter(config.source, mine, {schema.table.name: schema}).keep(schema.table.name, changes)
