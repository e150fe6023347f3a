"""The binlog source's rows, and the per-table change tables the driver works with.

Executors do the expensive part — decoding the binlog, in parallel — and also turn the rows into
typed Arrow columns per table, so the driver unpacks, compacts and commits whole columns (only the
filters read the chunk key of the rows they check as Python values).

**Envelope** (the Spark schema, ``stream.envelope``, the same for every table): one row per table
and block of changes, plus the one ``segment`` row each partition ends with.

- ``table``: ``database.table`` (null on segment rows).
- ``kind``: ``changes`` (``data`` holds an Arrow IPC stream of the block), ``gap`` (a change of
  the table binlake cannot replicate exactly, at ``at``: ``data`` holds JSON ``{reason, fix}``) or
  ``segment`` (the partition's end: ``at`` and ``file`` are its end offset, ``ts`` the time of its
  newest event, even when none of its changes is captured), or ``gtid`` (for tables with a
  changelog: from ``at`` on, rows belong to the transaction whose GTID ``data`` holds — null: none).
- ``at``: the block's first position (on segment rows: the segment's end).
- ``rows``: row changes in the block (on segment rows: in the whole segment).

**Change table** (``change_schema``; one per captured table, decoded from the blocks):

- ``op``: ``insert`` / ``update`` / ``delete`` for tables with a primary key (the event's kind:
  an insert or update is an upsert of the row, kept apart for ``__data_event_type__``; the new key
  of a key update is an ``update``); ``insert`` / ``delete`` (whole rows) for tables without;
  ``before``: the before image of an update that kept its key, only for tables with a changelog
  (``sink/history/changelog.py``; the upsert path drops them: ``upserts_only``).
- ``at``: the row's event's offset, packed (``BinlogOffset.packed``): sortable as one integer.
- ``idx``: order of rows within one event (an update of the key is two rows: delete, upsert).
- ``ts``: event time, epoch seconds.
- ``row``: the row as a struct of the table's columns (Arrow types of ``schema.type_mapping``, all
  nullable). Deletes of keyed tables carry only the key columns (the before image is not read);
  a key update is a delete of the old key and an ``update`` of the new row.
- ``absent``: null for a complete row; else a bitmask (bit i: column i) of the columns an update's
  row image did not carry (``binlog_row_image`` NOBLOB/MINIMAL): they keep the row's previous
  values, which the driver takes from the sink (``stream.shares.patches``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from binlake.errors import BinlakeError
from binlake.events import CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.schema.type_mapping import arrow_schema
from binlake.source.binlog.column_decoder import ColumnBlock, RawRows
from binlake.source.binlog.event_rows import EventRows, Gap
from binlake.source.binlog.row_decoder import ABSENT

ENVELOPE_SCHEMA = pa.schema(
    [
        ("table", pa.string()),
        ("kind", pa.string()),
        ("data", pa.binary()),
        ("at", pa.int64()),
        ("rows", pa.int64()),
        ("ts", pa.int64()),
        ("file", pa.string()),
    ]
)
CHANGES = "changes"
BEFORE = "before"
SEGMENT = "segment"
GAP = "gap"
GTID = "gtid"
ROW = "row"
ABSENT_COLUMNS = "absent"


def key_columns(table: CreateTable, chunk_keys: dict[str, str]) -> tuple[str, ...]:
    """The columns that identify a change: the primary key, or the configured chunk key."""
    if table.primary_key:
        return table.primary_key
    column = chunk_keys.get(table.table.name)
    return (column,) if column else ()


def change_schema(table: CreateTable) -> pa.Schema:
    """The schema of ``table``'s change table (see the module docstring)."""
    row = pa.struct([f.with_nullable(True) for f in arrow_schema(table)])
    return pa.schema(
        [
            ("op", pa.string()),
            ("at", pa.int64()),
            ("idx", pa.int32()),
            ("ts", pa.int64()),
            (ROW, row),
            (ABSENT_COLUMNS, pa.binary()),
        ]
    )


def empty_changes(table: CreateTable) -> pa.Table:
    return change_schema(table).empty_table()


def images(changes: pa.Table, columns: Iterable[str] | None = None) -> pa.Table:
    """The rows of a change table (or only ``columns`` of them) as a table of their columns."""
    row = changes.column(ROW)
    names = list(columns) if columns is not None else [f.name for f in row.type]
    return pa.table({name: pc.struct_field(row, name) for name in names})


def row_struct(fields: Sequence[pa.Field], rows: Sequence[tuple[Any, ...]]) -> pa.StructArray:
    """Row tuples (values in ``fields`` order, normalised like ``RowConverter``'s) as one struct
    array, built column by column."""
    if not fields:
        return pa.array([{}] * len(rows), pa.struct([]))
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in fields]
    return pa.StructArray.from_arrays(
        [pa.array(v, type=f.type) for v, f in zip(columns, fields, strict=True)], fields=list(fields)
    )


def values(changes: pa.Table, column: str, indices: pa.Array | None = None) -> list[Any]:
    """One column of the rows (or of the rows at ``indices``) as Python values."""
    field = pc.struct_field(changes.column(ROW), column)
    return list((field if indices is None else field.take(indices)).to_pylist())


_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


class _TableBlock:
    """Changes of one table waiting to be packed: decoded rows (column values kept row-wise until
    then), or undecoded events for the column decoder; ``seal`` packs what is waiting."""

    __slots__ = (
        "absent", "at", "befores", "columns", "first", "idx", "key_at", "keyed", "name", "ops", "rows",
        "schema", "sealed", "ts",
    )  # fmt: skip

    def __init__(self, table: CreateTable, chunk_keys: dict[str, str], befores: bool = False) -> None:
        self.schema = change_schema(table)
        self.name = table.table.name
        self.keyed = bool(table.primary_key)
        self.befores = befores and self.keyed
        """Whether updates that keep their key keep their before image (op ``before``)."""
        names = table.column_names
        self.key_at = [names.index(k) for k in key_columns(table, chunk_keys)]
        self.ops: list[str] = []
        self.at: list[int] = []
        self.idx: list[int] = []
        self.ts: list[int] = []
        self.rows: list[tuple[Any, ...]] = []
        self.absent: dict[int, bytes] = {}
        """Row number in ``rows`` → bitmask of the columns its image lacks (see ``ABSENT_COLUMNS``)."""
        self.columns: ColumnBlock | None = None
        self.first = 0  # position of the first undecoded event
        self.sealed: list[tuple[int, int, bytes]] = []
        """Packed blocks: (first position, changes, Arrow IPC stream)."""

    def add_raw(self, raw: RawRows, op: str, at: int, ts: int) -> int:
        """An undecoded event (its images after those waiting); returns how many images it holds."""
        if self.ops or (self.columns is not None and not self.columns.fits(raw.decoder)):
            self.seal()
        if self.columns is None:
            self.columns, self.first = ColumnBlock(raw.decoder), at
        return self.columns.add(raw, op, at, ts)

    def seal(self) -> None:
        if self.columns is not None:
            ops, at, idx, ts, arrays = self.columns.decode(self.keyed, self.befores)
            struct = pa.StructArray.from_arrays(arrays, fields=list(self.schema.field(ROW).type))
            self.sealed.append((self.first, _changes(ops), self._pack(ops, at, idx, ts, struct)))
            self.columns = None
        if self.ops:
            absent = None
            if self.absent:
                absent = [self.absent.get(i) for i in range(len(self.rows))]
                self.rows = [_present(r) if i in self.absent else r for i, r in enumerate(self.rows)]
            struct = row_struct(list(self.schema.field(ROW).type), self.rows)
            packed = self._pack(self.ops, self.at, self.idx, self.ts, struct, absent)
            self.sealed.append((self.at[0], _changes(self.ops), packed))
            self.ops, self.at, self.idx, self.ts, self.rows = [], [], [], [], []
            self.absent = {}

    def _pack(
        self, ops: Any, at: Any, idx: Any, ts: Any, struct: pa.StructArray, absent: list[Any] | None = None
    ) -> bytes:
        """One block as an Arrow IPC stream (one record batch)."""
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(ops, pa.string()),
                pa.array(at, pa.int64()),
                pa.array(idx, pa.int32()),
                pa.array(ts, pa.int64()),
                struct,
                pa.array(absent, pa.binary()) if absent is not None else pa.nulls(len(ops), pa.binary()),
            ],
            schema=self.schema,
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema, options=_IPC) as writer:
            writer.write_batch(batch)
        return bytes(sink.getvalue())


class RecordBuilder:
    """Turns row images of one binlog segment into envelope batches (executor side)."""

    def __init__(
        self,
        tables: Iterable[CreateTable],
        chunk_keys: dict[str, str],
        befores: frozenset[TableId] = frozenset(),
    ) -> None:
        """``befores``: tables whose updates keep their before images (op ``before``)."""
        self._blocks = {
            table.table: _TableBlock(table, chunk_keys, table.table in befores) for table in tables
        }
        self._pending = 0
        self._envelope: list[list[Any]] = [[] for _ in ENVELOPE_SCHEMA]
        self.rows = 0
        self._gtid: object = _UNSEEN  # a segment's first change of a changelog table is marked

    def __len__(self) -> int:
        return self._pending

    def add(self, event: EventRows | Gap, gtid: str | None = None) -> None:
        """The rows of one rows event (inserts and deletes go in whole, updates pair by pair) of
        the transaction ``gtid``, or a gap (a change binlake cannot replicate: the driver decides
        what it means)."""
        if isinstance(event, Gap):
            data = json.dumps({"reason": event.reason, "fix": event.fix}).encode()
            at = event.offset.packed
            self._add_envelope(event.table.name, GAP, data, at, 0, event.timestamp, event.offset.file)
            return
        table, op, images, offset, ts = event
        block = self._blocks[table]
        at = offset.packed
        if block.befores and gtid != self._gtid:  # a changelog shows each change's transaction
            self._add_envelope(None, GTID, gtid.encode() if gtid else None, at, 0, ts, offset.file)
            self._gtid = gtid
        if not isinstance(images, list):  # for the column decoder, with the block
            try:
                n = block.add_raw(images, op, at, ts)
            except ValueError as e:
                raise BinlakeError(
                    f"Could not decode the rows of {table} at {offset}: {e}. The column decoder read "
                    "them by the table map's column types. Fix: set `stream.column_decoder: false` to "
                    "decode row by row, and please report the table's definition."
                ) from None
            self._pending += n
            self.rows += n // 2 if op == "update" else n
            return
        if block.columns is not None:
            block.seal()
        if op == "update":
            self._pending += self._update(block, images, at, ts)
            self.rows += len(images) // 2
            return
        n = len(images)
        if op == "delete" and block.keyed:  # only the key counts; a MINIMAL image has nothing else
            if block.befores:  # … but a changelog shows the whole row: ``stream.shares.patches`` fills it
                block.absent.update(
                    (len(block.rows) + j, _mask(image)) for j, image in enumerate(images) if ABSENT in image
                )
            images = [_present(image) for image in images]
        block.ops.extend(["delete" if op == "delete" else "insert"] * n)
        block.idx.extend(range(0 if op == "delete" else 1, 2 * n, 2))  # like an update's before/after
        block.rows.extend(images)
        block.at.extend([at] * n)
        block.ts.extend([ts] * n)
        self._pending += n
        self.rows += n

    def _update(self, block: _TableBlock, images: list[Any], at: int, ts: int) -> int:
        ops, idx, rows = block.ops, block.idx, block.rows
        keyed, key_at = block.keyed, block.key_at
        for i in range(0, len(images), 2):
            before, after = images[i], images[i + 1]
            # Keyed: the before image only matters when the key itself changed (delete the old
            # key). Keyless: a row is its own identity: remove the before image, add the after.
            changed = not keyed or [before[k] for k in key_at] != [after[k] for k in key_at]
            if changed or block.befores:
                ops.append("delete" if changed else BEFORE)
                idx.append(i)
                if block.befores and ABSENT in before:
                    block.absent[len(rows)] = _mask(before)
                rows.append(_present(before) if keyed else before)
            ops.append("update" if keyed else "insert")
            idx.append(i + 1)
            if ABSENT in after:
                block.absent[len(rows)] = _mask(after)
            rows.append(after)
        added = len(rows) - len(block.at)
        block.at.extend([at] * added)
        block.ts.extend([ts] * added)
        return added

    def segment(self, end: BinlogOffset, timestamp: int) -> None:
        """The segment's closing row: its end offset and the time of its newest event."""
        self._add_envelope(None, SEGMENT, None, end.packed, self.rows, timestamp, end.file)

    def batch(self) -> pa.RecordBatch:
        """Envelope rows for the changes added (and the segment row, if given) since the last call."""
        for block in self._blocks.values():
            block.seal()
            for first, count, data in block.sealed:
                self._add_envelope(block.name, CHANGES, data, first, count, 0)
            block.sealed = []
        self._pending = 0
        arrays = [pa.array(v, type=f.type) for v, f in zip(self._envelope, ENVELOPE_SCHEMA, strict=True)]
        self._envelope = [[] for _ in ENVELOPE_SCHEMA]
        return pa.RecordBatch.from_arrays(arrays, schema=ENVELOPE_SCHEMA)

    def _add_envelope(
        self,
        table: str | None,
        kind: str,
        data: bytes | None,
        at: int,
        rows: int,
        ts: int,
        file: str | None = None,
    ) -> None:
        for values, value in zip(self._envelope, (table, kind, data, at, rows, ts, file), strict=True):
            values.append(value)


def _changes(ops: Sequence[str]) -> int:
    """Row changes among a block's rows (a before image is part of its update)."""
    return len(ops) - sum(1 for op in ops if op == BEFORE)


def upserts_only(changes: pa.Table) -> pa.Table:
    """A change table without its ``before`` rows (what the upsert table's merge reads)."""
    ops = changes.column("op")
    if not pc.any(pc.equal(ops, BEFORE)).as_py():
        return changes
    return changes.filter(pc.not_equal(ops, BEFORE))


def _mask(image: tuple[Any, ...]) -> bytes:
    """The bitmask (bit i: column i) of the columns ``image`` lacks."""
    bits = 0
    for i, value in enumerate(image):
        if value is ABSENT:
            bits |= 1 << i
    return bits.to_bytes((len(image) + 7) // 8, "little")


def _present(image: tuple[Any, ...]) -> tuple[Any, ...]:
    """``image`` with NULL where it lacks a column (the bitmask says which)."""
    return tuple(None if value is ABSENT else value for value in image)


def absent_columns(mask: bytes, names: Sequence[str]) -> list[str]:
    """The columns an ``absent`` bitmask names."""
    return [name for i, name in enumerate(names) if mask[i >> 3] >> (i & 7) & 1]


_UNSEEN = object()


class TransactionIds:
    """The GTIDs of a batch's transactions (its ``gtid`` rows), for the positions of its rows."""

    def __init__(self, head: pa.Table) -> None:
        rows = head.filter(pc.equal(head.column("kind"), GTID)).sort_by("at")
        self._at = rows.column("at").to_numpy()
        # One more, null: what a position before the first GTID row finds (index -1).
        self._gtids = np.array([*(d.decode() if d else None for d in rows.column("data").to_pylist()), None])

    def of(self, at: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The GTID of the transaction of each position (null: none, or the server writes none)."""
        found = np.searchsorted(self._at, at.to_numpy(), side="right") - 1
        return pa.array(self._gtids[found], pa.string())


def gaps(envelope: pa.Table) -> list[Gap]:
    """The ``gap`` rows of ``envelope`` (see the module docstring), in binlog order."""
    rows = envelope.filter(pc.equal(envelope.column("kind"), GAP)).to_pylist()
    found = []
    for row in rows:
        detail = json.loads(row["data"])
        offset = BinlogOffset.unpacked(row["file"], row["at"])
        found.append(Gap(TableId.parse(row["table"]), detail["reason"], detail["fix"], offset, row["ts"]))
    return sorted(found, key=lambda g: g.offset)


def table_changes(envelope: pa.Table) -> dict[str, pa.Table]:
    """The change tables in the ``changes`` rows of ``envelope``, by table, in binlog order.

    Blocks are put in order by their first position, not rows by theirs: a block holds whole
    events of one segment in order, and segments do not overlap (sorting a batch's rows again
    cost more than anything else the driver does with them). One chunk per table: compaction
    takes rows from it by index, which on ~50 chunks of structs cost 0.36 s a batch (0.03 s).
    """
    blocks = envelope.filter(pc.equal(envelope.column("kind"), CHANGES))
    data = blocks.column("data")
    order = sorted(range(blocks.num_rows), key=blocks.column("at").to_pylist().__getitem__)
    names = blocks.column("table").to_pylist()
    parts: dict[str, list[pa.Table]] = {}
    for i in order:
        parts.setdefault(names[i], []).append(pa.ipc.open_stream(data[i].as_buffer()).read_all())
    return {table: pa.concat_tables(tables).combine_chunks() for table, tables in parts.items()}
