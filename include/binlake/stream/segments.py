"""Cutting a binlog range into micro-batches and segments, at transaction boundaries.

A micro-batch is admitted up to a byte budget (``stream.max_bytes_per_batch``) and always ends at
a transaction boundary; a micro-batch is cut into segments of about equal size, each starting at a
transaction boundary, so Spark tasks decode them in parallel. Binlog files are measured with
``SHOW BINARY LOGS``; boundaries inside a file come from a scan that skips row events undecoded.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from binlake.offsets import BinlogOffset
from binlake.source.binlog.scan import Boundary

#: Bytes of a binlog file before its first event (the magic number).
FILE_HEADER = 4


def distance(start: BinlogOffset, end: BinlogOffset, sizes: dict[str, int]) -> int:
    """Bytes of binlog between two offsets (``sizes``: file → size, from SHOW BINARY LOGS)."""
    if end <= start:
        return 0
    if start.file == end.file:
        return end.pos - start.pos
    between = sum(
        size for file, size in sizes.items() if start.sequence < BinlogOffset(file, 0).sequence < end.sequence
    )
    head = sizes.get(start.file, start.pos) - start.pos
    return head + between + max(0, end.pos - FILE_HEADER)


def admit(
    start: BinlogOffset, boundaries: Iterable[Boundary], max_bytes: int, sizes: dict[str, int]
) -> BinlogOffset | None:
    """The first boundary at which the batch from ``start`` reaches ``max_bytes`` (None: never;
    a batch holds at least one transaction whatever its size)."""
    for boundary in boundaries:
        if distance(start, boundary.offset, sizes) >= max_bytes:
            return boundary.offset
    return None


def cut(
    start: BinlogOffset,
    end: BinlogOffset,
    boundaries: Sequence[Boundary],
    parts: int,
    sizes: dict[str, int],
) -> list[tuple[BinlogOffset, BinlogOffset]]:
    """(start, end] cut at boundaries into at most ``parts`` segments of about equal bytes."""
    total = distance(start, end, sizes)
    cuts: list[BinlogOffset] = []
    target = 1
    for boundary in boundaries:
        if target >= parts:
            break
        offset = boundary.offset
        if not start < offset < end:
            continue
        if distance(start, offset, sizes) >= total * target / parts:
            cuts.append(offset)
            target += 1
    edges = [start, *cuts, end]
    return list(itertools.pairwise(edges))
