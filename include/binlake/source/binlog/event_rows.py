"""What a rows event gives the stream: its images (``EventRows``), or a ``Gap`` where binlake
cannot replicate the change exactly — rows logged as a statement, an image without the values
binlake needs; partial images (NOBLOB, MINIMAL) completed as far as the event allows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from binlake.errors import BinlakeError
from binlake.events import TableId
from binlake.offsets import BinlogOffset

if TYPE_CHECKING:
    from binlake.source.binlog.column_decoder import RawRows


RowOp = Literal["insert", "update", "delete"]


class EventRows(NamedTuple):
    """The row images of one rows event: for updates, before and after images alternate (in
    columnar mode, ``RawRows`` where the column decoder takes the event)."""

    table: TableId
    op: RowOp
    images: list[Any] | RawRows
    offset: BinlogOffset
    timestamp: int


class Gap(NamedTuple):
    """A change of a table binlake cannot replicate exactly from the binlog (rows logged as a
    statement, a row image without the values binlake needs): from ``offset`` on, the sink
    table can be exact again only after the table is read anew (a backfill)."""

    table: TableId
    reason: str
    """What was found (never a statement's text: it may hold secrets)."""
    fix: str
    """How to make the writing application log what binlake needs."""
    offset: BinlogOffset
    timestamp: int


class UnreplicableChangeError(BinlakeError):
    """A reader met a change it cannot replicate exactly (see ``Gap``)."""

    def __init__(self, gap: Gap) -> None:
        self.gap = gap
        super().__init__(gap_message(gap))


def gap_message(gap: Gap, what: str = "") -> str:
    """The error text for a gap: what, where, why, and the fix."""
    return (
        f"The binlog at {gap.offset} holds a change of `{gap.table}` binlake cannot replicate exactly: "
        f"{gap.reason}.{what} Fix: {gap.fix}; then read the table anew with "
        f"`binlake backfill --table {gap.table}` — a stream passes this position once such a backfill, "
        "read after it, is staged."
    )


STATEMENT_FIX = (
    "make the application log rows: `SET SESSION binlog_format = 'ROW'` in its sessions (or drop "
    "its override of the server's ROW format)"
)


def any_absent(images: list[Any]) -> bool:
    from binlake.source.binlog.row_decoder import ABSENT

    return any(image is not None and ABSENT in image for image in images)


def complete_images(
    table: TableId, op: RowOp, images: list[Any], schema: Any, offset: BinlogOffset, timestamp: int
) -> EventRows | Gap:
    """Images of an event without every column (``binlog_row_image`` NOBLOB or MINIMAL), made as
    complete as the event allows: an update's after image takes what its before image holds (the
    key, under MINIMAL), an insert's absent columns their default — a NULL, a number or a string
    (an expression default such as CURRENT_TIMESTAMP is a gap: its value was the server's own).
    Columns an update's after image still lacks stay ``ABSENT``: the row's previous value, which
    the stream takes from the sink."""
    from binlake.schema.defaults import literal_default
    from binlake.source.binlog.row_decoder import ABSENT

    completed: list[Any] = []
    if op == "update":
        for i in range(0, len(images), 2):
            before, after = images[i], images[i + 1]
            if ABSENT in after:
                after = tuple(b if a is ABSENT else a for a, b in zip(after, before, strict=True))
            completed += [before, after]
        return EventRows(table, op, completed, offset, timestamp)
    if op == "delete":
        keys = set(schema.primary_key)
        for image in images:
            lacking = [c.name for c, v in zip(schema.columns, image, strict=True) if v is ABSENT]
            if lacking and (not keys or keys & set(lacking)):
                return Gap(
                    table,
                    f"a delete whose row image lacks column(s) {', '.join(lacking)} needed to find the "
                    "row (`binlog_row_image` NOBLOB or MINIMAL in the writing session)",
                    IMAGE_FIX,
                    offset,
                    timestamp,
                )
        return EventRows(table, op, images, offset, timestamp)
    defaults = {c.name: literal_default(c) for c in schema.columns}
    for image in images:
        row = list(image)
        for i, column in enumerate(schema.columns):
            if row[i] is not ABSENT:
                continue
            default = defaults[column.name]
            if default is None:
                return Gap(
                    table,
                    f"an insert without a value for column `{column.name}` (`binlog_row_image` NOBLOB or "
                    f"MINIMAL in the writing session), whose default `{column.default}` only the server "
                    "could evaluate",
                    IMAGE_FIX,
                    offset,
                    timestamp,
                )
            row[i] = default.value
        completed.append(tuple(row))
    return EventRows(table, op, completed, offset, timestamp)


IMAGE_FIX = (
    "make the application log full row images: `SET SESSION binlog_row_image = 'FULL'` in its "
    "sessions (or drop its override of the server's FULL)"
)
