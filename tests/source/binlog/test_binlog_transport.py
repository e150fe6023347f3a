"""Compressed binlogs read exactly like plain ones: MariaDB's compressed events and MySQL's
transaction payloads (python-mysql-replication drops both without a word).

MariaDB's compression is real here (a server with ``log_bin_compress``). MySQL's transaction
compression is not (no MySQL server on these machines): the test connection below turns the real
server's transactions into ``TRANSACTION_PAYLOAD_EVENT``s exactly as the documented format has
them (libbinlogevents' ``Transaction_payload_event``: a type-length-value header, then the
transaction's events, checksums off, zstd-compressed), and binlake must read the same rows.
"""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections import deque
from typing import Any

import pymysql
import pytest
import zstandard
from pymysql.protocol import MysqlPacket

from binlake.config import SourceConfig
from binlake.events import TableId
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog import scan as binlog_scan
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.binlog.scan import transactions
from binlake.source.binlog.transport import (
    BinlogConnection,
    CompressedEventError,
    mariadb_uncompress,
    payload_events,
)
from binlake.source.chunks.reader import ChunkReader, SnapshotHooks
from binlake.source.chunks.splitter import Chunk, ChunkRange
from binlake.source.server.connection import connect
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.conftest import ServerFactory
from tests.helpers import binlog_range, source_config

#: Every event above 10 bytes compressed.
COMPRESSED = {"log-bin-compress": "ON", "log-bin-compress-min-len": "10"}


def _record(plain: bytes) -> bytes:
    """MariaDB's compressed record: marker and length width, the length big-endian, zlib."""
    width = (len(plain).bit_length() + 7) // 8
    return bytes([0x80 | width]) + len(plain).to_bytes(width, "big") + zlib.compress(plain)


@pytest.mark.parametrize("size", [5, 300, 70_000, 17_000_000])
def test_compressed_records_of_every_length_width(size: int) -> None:
    plain = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    assert mariadb_uncompress(_record(plain)) == plain  # the length is big-endian: 300 is 01 2c


def test_a_record_without_its_marker_is_refused() -> None:
    with pytest.raises(CompressedEventError, match="marker bit"):
        mariadb_uncompress(b"\x01\x05" + zlib.compress(b"12345"))


def _database(server: PrivateMariaDB, name: str) -> str:
    server.execute(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
    return name


def _schema(source: SourceConfig, table: TableId) -> Any:
    with contextlib.closing(connect(source)) as conn:
        (schema,) = discover(conn, [table])
    return schema


STATEMENTS = [
    "INSERT INTO t VALUES (1, 'short', 1.5), (2, REPEAT('long', 20000), NULL)",  # a 80 KB row
    "INSERT INTO t SELECT seq, CONCAT('v', seq), seq / 3 FROM seq_3_to_500",
    "UPDATE t SET v = REPEAT('u', 300), d = d + 1 WHERE id % 7 = 0",
    "UPDATE t SET id = id + 1000 WHERE id BETWEEN 10 AND 20",
    "DELETE FROM t WHERE id % 11 = 0",
]


def _changes(server: PrivateMariaDB, database: str) -> tuple[Any, Any]:
    setup = ["CREATE TABLE t (id INT PRIMARY KEY, v MEDIUMTEXT, d DECIMAL(10,3))"]
    return binlog_range(server, database, setup, STATEMENTS)


def _rows(source: SourceConfig, table: TableId, start: Any, end: Any, server_id: int) -> list[Any]:
    convert = RowConverter(_schema(source, table))
    reader = BinlogReader(source, server_id, start, end, {table}, lambda _: convert)
    return list(reader.rows())


def test_mariadb_compressed_events_read_like_plain_ones(
    mariadb: PrivateMariaDB, mariadb_factory: ServerFactory
) -> None:
    compressed = mariadb_factory(**COMPRESSED)
    plain_db, compressed_db = _database(mariadb, "tr_plain"), _database(compressed, "tr_compressed")
    plain_range = _changes(mariadb, plain_db)
    compressed_range = _changes(compressed, compressed_db)
    plain = _rows(source_config(mariadb, plain_db), TableId(plain_db, "t"), *plain_range, 6401)
    ours = _rows(
        source_config(compressed, compressed_db), TableId(compressed_db, "t"), *compressed_range, 6402
    )
    assert len(plain) > 500
    assert [(r.op, r.before, r.after) for r in ours] == [(r.op, r.before, r.after) for r in plain]


def test_a_compressed_ddl_statement_is_seen(mariadb_factory: ServerFactory) -> None:
    server = mariadb_factory(**COMPRESSED)
    database = _database(server, "tr_ddl")
    setup = ["CREATE TABLE t (id INT PRIMARY KEY)"]
    start, end = binlog_range(server, database, setup, ["ALTER TABLE t ADD COLUMN w INT DEFAULT 5"])
    (boundary,) = transactions(source_config(server, database), 6403, start, end)
    assert boundary.statement == "ALTER TABLE t ADD COLUMN w INT DEFAULT 5"


def test_a_chunk_is_corrected_from_compressed_events(mariadb_factory: ServerFactory) -> None:
    server = mariadb_factory(**COMPRESSED)
    database = _database(server, "tr_chunk")
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))",
        "INSERT INTO t SELECT seq, 'before' FROM seq_1_to_100",
        database=database,
    )
    source = source_config(server, database)
    schema = _schema(source, TableId(database, "t"))
    chunk = Chunk(TableId(database, "t"), 0, "id", ChunkRange(20, 60))

    def write(_: Chunk) -> None:
        server.execute(
            "UPDATE t SET v = REPEAT('after', 30) WHERE id BETWEEN 25 AND 35",
            "DELETE FROM t WHERE id IN (40, 45, 59)",
            "INSERT INTO t VALUES (45, 'x'), (59, REPEAT('y', 150))",
            "DELETE FROM t WHERE id = 45",
            database=database,
        )

    with ChunkReader(source, schema, 6404, SnapshotHooks(after_select=write)) as reader:
        result = reader.read(chunk)
    assert result.binlog_changes > 0
    now = {
        r[0]: r[1] for r in server.query("SELECT id, v FROM t WHERE id >= 20 AND id < 60", database=database)
    }
    assert {r["id"]: r["v"] for r in result.data.to_pylist()} == now


# -- MySQL's transaction payloads ------------------------------------------------------------------

_GTID, _XID, _FORMAT_DESCRIPTION, _PAYLOAD = 0xA2, 0x10, 0x0F, 0x28


def _tlv(field: int, value: int) -> bytes:
    encoded = _packed(value)
    return _packed(field) + _packed(len(encoded)) + encoded


def _packed(value: int) -> bytes:
    if value < 0xFB:
        return bytes([value])
    if value < 1 << 16:
        return b"\xfc" + value.to_bytes(2, "little")
    if value < 1 << 24:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


def transaction_payload(
    events: list[bytes], end: int, header: bytes, checksum: bool, zstd: bool = True
) -> bytes:
    """A TRANSACTION_PAYLOAD_EVENT holding ``events`` (without checksums) as MySQL 8.0.20+ writes it."""
    inner = b"".join(events)
    payload = zstandard.ZstdCompressor().compress(inner) if zstd else inner
    body = (
        (_tlv(2, 0) + _tlv(3, len(inner)) if zstd else b"")
        + _tlv(1, len(payload))
        + b"\x00"  # the header's end mark
        + payload
    )
    size = 19 + len(body) + (4 if checksum else 0)
    timestamp, _, server_id = struct.unpack_from("<IBI", header)
    event = struct.pack("<IBIIIH", timestamp, _PAYLOAD, server_id, size, end, 0) + body
    return event + struct.pack("<I", zlib.crc32(event)) if checksum else event


def _without_checksum(event: bytes) -> bytes:
    size = len(event) - 4
    return event[:9] + struct.pack("<I", size) + event[13:size]


class _TransactionCompressor(pymysql.connections.Connection):
    """The real server's stream with each transaction after its GTID event wrapped in one
    TRANSACTION_PAYLOAD_EVENT (what MySQL with ``binlog_transaction_compression=ON`` sends)."""

    wrapped = 0
    """Transactions wrapped so far (by every connection)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._ready: deque[MysqlPacket] = deque()
        self._events_checksum = False
        super().__init__(*args, **kwargs)

    def _read_packet(self, packet_type: Any = MysqlPacket) -> Any:
        if self._ready:
            return self._ready.popleft()
        packet = super()._read_packet(packet_type)
        data = packet.get_all_data()
        if not getattr(self, "_dumping", False) or len(data) <= 20 or data[0] != 0:
            return packet
        kind = data[5]
        if kind == _FORMAT_DESCRIPTION:
            self._events_checksum = data[-5] != 0
        if kind != _GTID or data[1 + 19 + 12] & 1:  # not a transaction's GTID (standalone DDL)
            return packet
        inner, last = [], None
        while True:  # the rest of the transaction, up to its XID
            following = super()._read_packet(packet_type).get_all_data()[1:]
            inner.append(_without_checksum(following) if self._events_checksum else following)
            if following[4] == _XID:
                last = following
                break
        end = struct.unpack_from("<I", last, 13)[0]
        event = transaction_payload(inner, end, last[:19], self._events_checksum)
        _TransactionCompressor.wrapped += 1
        self._ready.append(packet_type(b"\x00" + event, self.encoding))
        return packet


class _MySQLCompressed(BinlogConnection, _TransactionCompressor):
    """binlake's connection reading a MySQL-style compressed stream."""


@pytest.fixture
def mysql_compression(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binlog_scan, "BinlogConnection", _MySQLCompressed)


def test_mysql_transaction_payloads_read_like_plain_transactions(
    mariadb: PrivateMariaDB, database: str, mysql_compression: None
) -> None:
    start, end = _changes(mariadb, database)
    source, table = source_config(mariadb, database), TableId(database, "t")
    wrapped = _TransactionCompressor.wrapped
    ours = _rows(source, table, start, end, 6405)
    assert _TransactionCompressor.wrapped - wrapped == len(STATEMENTS)  # every one came compressed
    boundaries = [b.offset for b in transactions(source, 6406, start, end)]
    assert len(boundaries) == len(STATEMENTS)  # boundaries inside payloads are found too
    with pytest.MonkeyPatch.context() as plain_read:
        plain_read.setattr(binlog_scan, "BinlogConnection", BinlogConnection)
        plain = _rows(source, table, start, end, 6407)
    assert [(r.op, r.before, r.after) for r in ours] == [(r.op, r.before, r.after) for r in plain]
    # A payload's rows carry its end: the end of their transaction.
    assert {r.offset for r in ours} <= set(boundaries)


def test_payload_events_come_out_with_the_payloads_end_and_fresh_checksums() -> None:
    header = struct.pack("<IBIIIH", 1700000000, 0x02, 7, 0, 0, 0)
    first = header[:9] + struct.pack("<II", 19 + 3, 0) + b"\x00\x00" + b"abc"
    second = header[:9] + struct.pack("<II", 19 + 1, 0) + b"\x00\x00" + b"z"
    for zstd in (True, False):
        event = transaction_payload([first, second], 4242, header, checksum=True, zstd=zstd)
        out = payload_events(event, checksum=True)
        assert [e[19:-4] for e in out] == [b"abc", b"z"]
        assert all(struct.unpack_from("<I", e, 13)[0] == 4242 for e in out)
        assert all(struct.unpack_from("<I", e, -4)[0] == zlib.crc32(e[:-4]) for e in out)
        assert all(struct.unpack_from("<I", e, 9)[0] == len(e) for e in out)


def test_an_unknown_payload_compression_is_refused() -> None:
    header = struct.pack("<IBIIIH", 1, 0x28, 1, 0, 0, 0)
    body = _tlv(2, 7) + _tlv(1, 3) + b"\x00" + b"abc"
    event = header[:9] + struct.pack("<II", 19 + len(body), 99) + b"\x00\x00" + body
    with pytest.raises(CompressedEventError, match="algorithm 7"):
        payload_events(event, checksum=False)
