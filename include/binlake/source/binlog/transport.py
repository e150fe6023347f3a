"""The binlog connection binlake hands python-mysql-replication: compressed events made plain.

Servers can write a binlog in forms python-mysql-replication 1.0.17 does not know; it parses them
as ``NotImplementedEvent`` and its event filter drops them without a word — rows and DDL lost:

- MariaDB ``log_bin_compress=ON``: events above ``log_bin_compress_min_len`` bytes are written as
  ``QUERY_COMPRESSED_EVENT`` (165) and ``*_ROWS_COMPRESSED_EVENT_V1`` (166-168; v2 forms 169-171):
  the statement text, or the row images after the column bitmaps, zlib-compressed behind a header
  byte ``1000 0nnn`` and ``n`` bytes of the uncompressed length, big-endian.
- MySQL 8.0.20+ ``binlog_transaction_compression=ON``: a whole transaction's events (BEGIN, table
  maps, rows, XID) zstd-compressed inside one ``TRANSACTION_PAYLOAD_EVENT`` (40); the inner events
  carry no checksum.

:class:`BinlogConnection` is a pymysql connection that, once the binlog dump has begun, turns each
such packet into the plain event(s) it holds before the library sees it: a compressed query or
rows event becomes the uncompressed event of the same kind, a transaction payload the events
inside it. Every event keeps its position in the file (inner events of a payload take the
payload's end position: they are one transaction, and only its boundaries are resume points), so
offsets, watermarks and the stream's exactly-once bookkeeping are what they would be without
compression. Nothing else in binlake needs to know.

Written against python-mysql-replication 1.0.17 (which reads a stream through
``pymysql_wrapper(...)._read_packet()``) and pymysql 1.1.
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from typing import Any

from pymysql.protocol import MysqlPacket

from binlake.errors import BinlakeError
from binlake.source.server.connection import SourceConnection

#: Replication commands that start a binlog dump: the packets after them are events.
_COM_BINLOG_DUMP = 0x12
_COM_BINLOG_DUMP_GTID = 0x1E

_HEADER = 19
_CHECKSUM = 4
_FORMAT_DESCRIPTION = 0x0F
_ROTATE = 0x04
#: Heartbeats (v1, v2) carry no change and, on some servers, no checksum.
_HEARTBEATS = frozenset({0x1B, 0x29})
_QUERY = 0x02
_TRANSACTION_PAYLOAD = 0x28
_QUERY_COMPRESSED = 0xA5
#: MariaDB's compressed rows events → the plain rows event of the same kind (and format version).
_ROWS_COMPRESSED = {
    0xA6: (0x17, False),  # WRITE_ROWS_COMPRESSED_EVENT_V1 → WRITE_ROWS_EVENT_V1
    0xA7: (0x18, False),
    0xA8: (0x19, False),
    0xA9: (0x1E, True),  # WRITE_ROWS_COMPRESSED_EVENT (v2 layout) → WRITE_ROWS_EVENT_V2
    0xAA: (0x1F, True),
    0xAB: (0x20, True),
}
_UPDATE_ROWS = (0x18, 0x1F)
#: Query events' fixed post-header: thread id, exec time, db name length, error code, status length.
_QUERY_POST_HEADER = 13
#: Rows events' post-header: table id (6 bytes) and flags.
_ROWS_POST_HEADER = 8

#: TRANSACTION_PAYLOAD_EVENT header fields (type-length-value, each a packed integer).
_PAYLOAD_END_MARK, _PAYLOAD_SIZE, _PAYLOAD_COMPRESSION, _PAYLOAD_UNCOMPRESSED_SIZE = 0, 1, 2, 3
_ZSTD, _NO_COMPRESSION = 0, 255


class CompressedEventError(BinlakeError):
    """A compressed binlog event could not be made plain."""


def mariadb_uncompress(data: bytes) -> bytes:
    """MariaDB's compressed record (header byte, big-endian length, zlib stream) made plain."""
    if not data or not data[0] & 0x80:
        raise CompressedEventError("the compressed record's header byte lacks its marker bit (0x80)")
    algorithm, width = (data[0] & 0x70) >> 4, data[0] & 0x07
    if algorithm != 0:
        raise CompressedEventError(f"compression algorithm {algorithm} is unknown (MariaDB writes 0: zlib)")
    expected = int.from_bytes(data[1 : 1 + width], "big")
    plain = zlib.decompress(data[1 + width :])
    if len(plain) != expected:
        raise CompressedEventError(f"decompressed {len(plain)} bytes where the header says {expected}")
    return plain


def _packed_int(data: bytes, pos: int) -> tuple[int, int]:
    """A MySQL packed (length-encoded) integer at ``pos``: (value, position after it)."""
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
    if width is None:
        raise CompressedEventError(f"byte {first:#x} does not start a packed integer")
    return int.from_bytes(data[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def _event(header: bytes, body: bytes, kind: int, log_pos: int, checksum: bool) -> bytes:
    """An event with ``header``'s time, server id and flags, of ``kind``, sized for ``body``."""
    size = _HEADER + len(body) + (_CHECKSUM if checksum else 0)
    timestamp, _, server_id, _, _, flags = struct.unpack_from("<IBIIIH", header)
    event = struct.pack("<IBIIIH", timestamp, kind, server_id, size, log_pos, flags) + body
    return event + struct.pack("<I", zlib.crc32(event)) if checksum else event


def _split(event: bytes, checksum: bool) -> tuple[bytes, bytes, int]:
    """(header, body without checksum, the header's next-event position)."""
    body = event[_HEADER : len(event) - _CHECKSUM] if checksum else event[_HEADER:]
    return event[:_HEADER], body, struct.unpack_from("<I", event, 13)[0]


def plain_query(event: bytes, checksum: bool) -> bytes:
    """A QUERY_COMPRESSED_EVENT as the QUERY_EVENT it compresses (only the statement is compressed)."""
    header, body, log_pos = _split(event, checksum)
    db_length = body[8]
    status_length = struct.unpack_from("<H", body, 11)[0]
    text_at = _QUERY_POST_HEADER + status_length + db_length + 1  # the database name ends with NUL
    plain = body[:text_at] + mariadb_uncompress(body[text_at:])
    return _event(header, plain, _QUERY, log_pos, checksum)


def plain_rows(event: bytes, checksum: bool) -> bytes:
    """A compressed rows event as the plain rows event it compresses (the row images are)."""
    header, body, log_pos = _split(event, checksum)
    kind, v2 = _ROWS_COMPRESSED[header[4]]
    pos = _ROWS_POST_HEADER
    if v2:
        pos += struct.unpack_from("<H", body, pos)[0]  # the extra data's length counts its 2 bytes
    width, pos = _packed_int(body, pos)
    pos += ((width + 7) // 8) * (2 if kind in _UPDATE_ROWS else 1)
    return _event(header, body[:pos] + mariadb_uncompress(body[pos:]), kind, log_pos, checksum)


def payload_events(event: bytes, checksum: bool) -> list[bytes]:
    """The events inside a MySQL TRANSACTION_PAYLOAD_EVENT, each at the payload's end position."""
    _, body, log_pos = _split(event, checksum)
    fields: dict[int, int] = {}
    pos = 0
    while pos < len(body):
        field, pos = _packed_int(body, pos)
        if field == _PAYLOAD_END_MARK:
            break
        length, pos = _packed_int(body, pos)
        fields[field], _ = _packed_int(body, pos)
        pos += length
    size = fields.get(_PAYLOAD_SIZE, len(body) - pos)
    payload = body[pos : pos + size]
    compression = fields.get(_PAYLOAD_COMPRESSION, _NO_COMPRESSION)
    if compression == _ZSTD:
        import zstandard  # only servers with binlog_transaction_compression need it

        payload = zstandard.ZstdDecompressor().decompress(
            payload, max_output_size=fields.get(_PAYLOAD_UNCOMPRESSED_SIZE, 0)
        )
    elif compression != _NO_COMPRESSION:
        raise CompressedEventError(
            f"transaction payload compressed with algorithm {compression}, which binlake does not know "
            "(MySQL writes 0: zstd)"
        )
    events: list[bytes] = []
    at = 0
    while at < len(payload):
        inner_size = struct.unpack_from("<I", payload, at + 9)[0]
        inner = payload[at : at + inner_size]
        if inner_size < _HEADER or len(inner) != inner_size:
            raise CompressedEventError(f"an event inside the transaction payload is cut at byte {at}")
        events.append(_event(inner[:_HEADER], inner[_HEADER:], inner[4], log_pos, checksum))
        at += inner_size
    return events


def plain_events(event: bytes, checksum: bool) -> list[bytes] | None:
    """The plain events a compressed event holds (None: ``event`` is not compressed)."""
    kind = event[4]
    if kind == _QUERY_COMPRESSED:
        return [plain_query(event, checksum)]
    if kind in _ROWS_COMPRESSED:
        return [plain_rows(event, checksum)]
    if kind == _TRANSACTION_PAYLOAD:
        return payload_events(event, checksum)
    return None


class BinlogIntegrityError(BinlakeError):
    """A binlog event's bytes do not match its CRC32 checksum: damaged on disk or on the way."""


def verify_checksum(event: bytes, file: str) -> None:
    """Check ``event``'s trailing CRC32 (the server writes one per event under ``binlog_checksum=CRC32``).

    Raises:
        BinlogIntegrityError: the checksum does not match, naming the file and position.
    """
    if len(event) < _HEADER + _CHECKSUM:
        raise BinlogIntegrityError(
            _damaged(event, file, f"it is {len(event)} bytes long, shorter than a header")
        )
    stored = struct.unpack_from("<I", event, len(event) - _CHECKSUM)[0]
    computed = zlib.crc32(event[: len(event) - _CHECKSUM])
    if stored != computed:
        raise BinlogIntegrityError(
            _damaged(event, file, f"its CRC32 checksum is {stored:#010x}, its bytes give {computed:#010x}")
        )


def _damaged(event: bytes, file: str, found: str) -> str:
    end = struct.unpack_from("<I", event, 13)[0] if len(event) >= 17 else 0
    kind = event[4] if len(event) > 4 else -1
    start = max(0, end - len(event)) if end else "?"
    return (
        f"The binlog event of type {kind} at {file}:{start} (ending at position {end}) is damaged: {found}. "
        "binlake stops here rather than apply a change it cannot trust; nothing of the batch that "
        "holds it was applied. Fix: check that file on the server (`mariadb-binlog "
        "--verify-binlog-checksum` / `mysqlbinlog --verify-binlog-checksum`) and rerun: a fault of "
        "the network reads right the next time; a file damaged on disk must be restored from a "
        "replica, or the affected tables backfilled from a position after it."
    )


def rotated_file(event: bytes) -> str:
    """The binlog file a Rotate event names (its checksum, if any, left out: the dump's first,
    artificial Rotate comes before the format description says whether events carry one)."""
    name = event[_HEADER + 8 :]
    if (
        len(name) > _CHECKSUM
        and zlib.crc32(event[:-_CHECKSUM]) == struct.unpack_from("<I", event, len(event) - 4)[0]
    ):
        name = name[:-_CHECKSUM]
    return name.decode("utf-8", "replace")


def _zstd_errors() -> tuple[type[Exception], ...]:
    try:
        import zstandard
    except ImportError:
        return ()
    return (zstandard.ZstdError,)


class BinlogConnection(SourceConnection):
    """A pymysql connection whose binlog dump hands out compressed events as plain ones.

    Before the dump command it is an ordinary connection (python-mysql-replication sets session
    variables through it). After it, every event packet goes through :func:`plain_events`; the
    events a transaction payload holds are handed out one per read, in order.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._dumping = False
        self._checksum = False
        self._file = "?"  # the binlog file being read (its Rotate event names it): for messages
        self._waiting: deque[MysqlPacket] = deque()
        super().__init__(*args, **kwargs)

    def _write_bytes(self, data: bytes) -> None:
        if len(data) > 4 and data[4] in (_COM_BINLOG_DUMP, _COM_BINLOG_DUMP_GTID):
            self._dumping = True
        base: Any = super()
        base._write_bytes(data)

    def _read_packet(self, packet_type: type[MysqlPacket] = MysqlPacket) -> MysqlPacket:
        if self._waiting:
            return self._waiting.popleft()
        base: Any = super()
        packet: MysqlPacket = base._read_packet(packet_type)
        if not self._dumping:
            return packet
        raw: Any = packet
        data: bytes = raw.get_all_data()
        if len(data) <= _HEADER or data[0] != 0:  # EOF and error packets
            return packet
        kind = data[5]
        if kind == _FORMAT_DESCRIPTION:
            # Its last 5 bytes: the checksum algorithm of the events that follow, and a checksum.
            self._checksum = data[-5] != 0
        if kind == _ROTATE:
            self._file = rotated_file(data[1:])
        if self._checksum and kind not in _HEARTBEATS:
            verify_checksum(data[1:], self._file)  # compressed events: the outer one, before all else
        if kind not in _REWRITTEN:
            return packet
        try:
            events = plain_events(bytes(data[1:]), self._checksum)
        except _DECODE_ERRORS as e:
            position = struct.unpack_from("<I", data, 14)[0]
            raise CompressedEventError(
                f"Could not decompress the binlog event (type {kind}) that ends at position {position}: "
                f"{e}. The binlog is compressed (MariaDB `log_bin_compress` or MySQL "
                "`binlog_transaction_compression`); please report the server version. Fix meanwhile: "
                "turn compression off on the server (the events already written stay compressed)."
            ) from None
        assert events  # plain_events returns a list for every kind in _REWRITTEN
        packets = [packet_type(b"\x00" + e, self.encoding) for e in events]
        self._waiting.extend(packets[1:])
        return packets[0]


_REWRITTEN = frozenset({_QUERY_COMPRESSED, _TRANSACTION_PAYLOAD, *_ROWS_COMPRESSED})
#: What a damaged compressed event raises while it is made plain (each said as binlake's error).
_DECODE_ERRORS: tuple[type[Exception], ...] = (
    CompressedEventError, zlib.error, ValueError, struct.error, IndexError, *_zstd_errors()
)  # fmt: skip
