"""Binlog integrity: every event's CRC32 checked where the server writes checksums (a compressed
event's outer one before anything is decompressed); a damaged event stops the read naming the file
and position, in the stream's reader and in a chunk's correction alike."""

from __future__ import annotations

import contextlib
import struct
import zlib
from typing import Any, ClassVar

import pytest
from pymysql.protocol import MysqlPacket

from binlake.config import SourceConfig
from binlake.events import TableId
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog import scan as binlog_scan
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.binlog.transport import (
    BinlogConnection,
    BinlogIntegrityError,
    rotated_file,
    verify_checksum,
)
from binlake.source.chunks.reader import ChunkReader, SnapshotHooks
from binlake.source.chunks.splitter import Chunk, ChunkRange
from binlake.source.server.connection import SourceConnection, connect
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.conftest import ServerFactory
from tests.helpers import binlog_range, source_config

WRITE_ROWS = (0x17, 0x1E, 0xA6, 0xA9)  # v1, v2 and MariaDB's compressed forms


def _event(kind: int, body: bytes, end: int) -> bytes:
    header = struct.pack("<IBIIIH", 1700000000, kind, 7, 19 + len(body) + 4, end, 0)
    return header + body + struct.pack("<I", zlib.crc32(header + body))


def _flipped(event: bytes, at: int) -> bytes:
    return event[:at] + bytes([event[at] ^ 0x10]) + event[at + 1 :]


def test_a_flipped_bit_anywhere_in_an_event_is_found() -> None:
    event = _event(0x1E, b"\x01\x02\x03 some row image \xff", 4242)
    verify_checksum(event, "binlog.000003")
    for at in (0, 4, 13, 19, 25, len(event) - 1):  # header, type, position, body, checksum
        with pytest.raises(BinlogIntegrityError) as damaged:
            verify_checksum(_flipped(event, at), "binlog.000003")
        assert "is damaged: its CRC32 checksum is" in str(damaged.value)
    start = 4242 - len(event)
    message = str(damaged.value)
    assert f"The binlog event of type 30 at binlog.000003:{start} (ending at position 4242)" in message
    assert "--verify-binlog-checksum" in message


def test_a_rotate_names_its_file_with_or_without_a_checksum() -> None:
    body = struct.pack("<Q", 4) + b"mysql-bin.000042"
    with_checksum = _event(0x04, body, 0)
    assert rotated_file(with_checksum) == "mysql-bin.000042"
    assert rotated_file(with_checksum[:-4]) == "mysql-bin.000042"


class _FlipFirstRows(SourceConnection):
    """Below binlake's connection: one bit of the first rows event of the dump flipped on the way
    in (as a bad disk or network would); remembers where that event is."""

    damaged: ClassVar[list[tuple[int, int]]] = []  # (kind, end position) of each damaged event
    kinds: ClassVar[tuple[int, ...]] = WRITE_ROWS  # which events may be damaged

    def _read_packet(self, packet_type: Any = MysqlPacket) -> Any:
        packet = super()._read_packet(packet_type)
        data = packet.get_all_data()
        dumping = getattr(self, "_dumping", False)
        if (
            dumping
            and not _FlipFirstRows.damaged
            and len(data) > 40
            and data[0] == 0
            and data[5] in _FlipFirstRows.kinds
        ):
            _FlipFirstRows.damaged.append((data[5], struct.unpack_from("<I", data, 14)[0]))
            return packet_type(_flipped(bytes(data), 30), self.encoding)  # inside the event's body
        return packet


class _Damaging(BinlogConnection, _FlipFirstRows):
    """binlake's connection reading a stream with one damaged rows event."""


@pytest.fixture
def damaging(monkeypatch: pytest.MonkeyPatch) -> type[_Damaging]:
    _FlipFirstRows.damaged.clear()
    monkeypatch.setattr(binlog_scan, "BinlogConnection", _Damaging)
    return _Damaging


def _schema(source: SourceConfig, table: TableId) -> Any:
    with contextlib.closing(connect(source)) as conn:
        (schema,) = discover(conn, [table])
    return schema


def _read_rows(server: PrivateMariaDB, database: str, server_id: int) -> str:
    setup = ["CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))"]
    statements = [
        "INSERT INTO t SELECT seq, REPEAT('v', seq % 150) FROM seq_1_to_300",
        "DELETE FROM t WHERE id < 9",
    ]
    start, end = binlog_range(server, database, setup, statements)
    source, table = source_config(server, database), TableId(database, "t")
    convert = RowConverter(_schema(source, table))
    with pytest.raises(BinlogIntegrityError) as damaged:
        list(BinlogReader(source, server_id, start, end, {table}, lambda _: convert).rows())
    ((kind, end_at),) = _FlipFirstRows.damaged
    message = str(damaged.value)
    assert f"The binlog event of type {kind} at {start.file}:" in message
    assert f"(ending at position {end_at}) is damaged" in message
    return message


def test_a_damaged_rows_event_stops_the_stream_naming_file_and_position(
    mariadb: PrivateMariaDB, database: str, damaging: type[_Damaging]
) -> None:
    _read_rows(mariadb, database, 6501)


def test_a_damaged_compressed_event_fails_its_checksum_before_decompressing(
    mariadb_factory: ServerFactory, damaging: type[_Damaging], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_FlipFirstRows, "kinds", (0xA6, 0xA9))  # only a compressed rows event
    server = mariadb_factory(**{"log-bin-compress": "ON", "log-bin-compress-min-len": "10"})
    server.execute("DROP DATABASE IF EXISTS integrity", "CREATE DATABASE integrity")
    message = _read_rows(server, "integrity", 6502)
    assert _FlipFirstRows.damaged[0][0] in (0xA6, 0xA9)  # the compressed form was the one damaged
    assert "decompress" not in message


def test_a_damaged_event_in_a_chunks_binlog_window_fails_the_chunk(
    mariadb: PrivateMariaDB, database: str, damaging: type[_Damaging]
) -> None:
    mariadb.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, status VARCHAR(20))",
        "INSERT INTO orders SELECT seq, 'new' FROM seq_1_to_100",
        database=database,
    )
    source = source_config(mariadb, database)
    schema = _schema(source, TableId(database, "orders"))
    chunk = Chunk(schema.table, 0, "id", ChunkRange(None, None))

    def write(_: Chunk) -> None:
        mariadb.execute("INSERT INTO orders SELECT seq, 'late' FROM seq_200_to_260", database=database)

    with ChunkReader(source, schema, 6503, SnapshotHooks(after_low_watermark=write)) as reader:
        with pytest.raises(BinlogIntegrityError, match=r"is damaged: its CRC32 checksum is"):
            reader.read(chunk)
    assert _FlipFirstRows.damaged  # the chunk's correction read the damaged event
