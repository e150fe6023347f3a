"""Chunk checksums of the source, computed by the server, each exact at a known binlog position.

The server computes ``COUNT(*)`` and the sum of the rows' hashes (``verify.canonical``) of a chunk's
key range; only two numbers per chunk travel. No lock, ever:

- on MariaDB (and Percona), a group of chunks is summed inside ``START TRANSACTION WITH CONSISTENT
  SNAPSHOT``, whose exact binlog position the server reports (``binlog_snapshot_file`` /
  ``binlog_snapshot_position``): every sum of the group is exact there (``low == high``);
- elsewhere (MySQL), each chunk between a low and a high watermark, as the snapshot reads chunks:
  the sum is exact at ``high`` unless a change of the chunk's range lies between the two, which the
  verification sees in the binlog it reads anyway, and then sums that chunk again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pymysql

from binlake.config import SourceConfig
from binlake.events import Column, CreateTable, quote
from binlake.offsets import BinlogOffset
from binlake.schema.transform_sql import filter_sql
from binlake.schema.transforms import Transform
from binlake.source.binlog.scan import gtid_boundaries
from binlake.source.chunks.splitter import ChunkRange, range_condition
from binlake.source.chunks.watermarks import LowWatermark, consistent_snapshot, current_offset
from binlake.source.server.connection import connect, server_version
from binlake.source.server.cursors import literal_percents
from binlake.verify.canonical import MASK, Hashing, checksum_sql

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChunkSum:
    """A chunk's row count and hash sum on one side, and where on the binlog it holds."""

    index: int
    range: ChunkRange
    rows: int
    total: int
    low: BinlogOffset
    high: BinlogOffset
    """Exact at ``high`` (always when ``low == high``; else if no change of the range lies between)."""


def source_sums(
    source: SourceConfig,
    table: CreateTable,
    key_column: str,
    chunks: Sequence[tuple[int, ChunkRange]],
    parallelism: int,
    server_id: int,
    consistent_snapshot: bool | None = None,
    columns: Sequence[Column] | None = None,
    transform: Transform | None = None,
    hashing: Hashing = "md5",
) -> list[ChunkSum]:
    """The server's sums of ``chunks`` (index, range) of ``table``, ``parallelism`` connections at
    once (``server_id``: the first of their replica ids, for watermarks that look into the binlog;
    ``consistent_snapshot``: None = where the server reports the snapshot's position; ``columns``:
    the columns compared, default all; ``transform``: the server computes its projection's columns
    and sums only the rows its filter keeps; ``hashing``: ``canonical.server_hashing``'s)."""
    if not chunks:
        return []
    groups = _groups(list(chunks), max(1, parallelism))
    sql = checksum_sql(columns if columns is not None else table.columns, transform_sql(transform), hashing)
    if transform is not None and transform.spec.filter:
        sql += f" FROM {table.table.quoted()} WHERE ({filter_sql(transform.spec.filter, str(table.table))})"
    else:
        sql += f" FROM {table.table.quoted()} WHERE TRUE"
    with ThreadPoolExecutor(max_workers=len(groups), thread_name_prefix="verify-source") as pool:
        done = pool.map(
            lambda i: _sum_group(
                source, sql, table, key_column, groups[i], server_id + i, consistent_snapshot
            ),
            range(len(groups)),
        )
        return sorted((s for group in done for s in group), key=lambda s: s.index)


def transform_sql(transform: Transform | None) -> dict[str, str]:
    """SQL of each computed column of ``transform``'s projection, and the source column of each
    kept (maybe renamed) one, by sink column name."""
    if transform is None:
        return {}
    return {i.name: quote(i.node.value) if i.node.op == "column" else i.node.sql for i in transform.items}


def _groups(chunks: list[tuple[int, ChunkRange]], parts: int) -> list[list[tuple[int, ChunkRange]]]:
    size = -(-len(chunks) // parts)
    return [chunks[i : i + size] for i in range(0, len(chunks), size)]


def _sum_group(
    source: SourceConfig,
    sql: str,
    table: CreateTable,
    key_column: str,
    chunks: list[tuple[int, ChunkRange]],
    server_id: int,
    consistent_snapshot: bool | None,
) -> list[ChunkSum]:
    with contextlib.closing(connect(source)) as conn:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")  # TIMESTAMPs in UTC, as the sink holds them
        version = server_version(conn)
        snapshot = consistent_snapshot if consistent_snapshot is not None else version.flavor == "mariadb"
        if snapshot:
            return _in_snapshot(conn, sql, table, key_column, chunks)
        low_watermark = LowWatermark(gtid_boundaries(source, server_id))
        sums = []
        for index, chunk in chunks:
            low = low_watermark.read(conn, version)
            rows, total = _sum(conn, sql, table, key_column, chunk)
            sums.append(ChunkSum(index, chunk, rows, total, low, current_offset(conn, version)))
        return sums


def _in_snapshot(
    conn: pymysql.Connection[Any],
    sql: str,
    table: CreateTable,
    key_column: str,
    chunks: list[tuple[int, ChunkRange]],
) -> list[ChunkSum]:
    with consistent_snapshot(conn) as at:
        sums = [ChunkSum(i, chunk, *_sum(conn, sql, table, key_column, chunk), at, at) for i, chunk in chunks]
    log.info("verify: %d chunks of %s summed in a consistent snapshot at %s", len(chunks), table.table, at)
    return sums


def _sum(
    conn: pymysql.Connection[Any], sql: str, table: CreateTable, key_column: str, chunk: ChunkRange
) -> tuple[int, int]:
    condition, params = range_condition(quote(key_column), chunk)
    with conn.cursor() as cur:
        # pymysql formats the parameters in with %: a transform's own % (DATE_FORMAT's) doubled.
        cur.execute(f"SELECT {literal_percents(sql)} AND {condition}", params)
        rows, total = cur.fetchone()
    return int(rows), int(total or 0) & MASK
