"""XA transactions: their rows count at ``XA COMMIT`` (its position and time), never at the prepare,
and not at all after ``XA ROLLBACK`` — read from before the prepare, from between prepare and
commit (the prepare is found in the binlog, also files back), or through a boundary scan.

MariaDB's XA groups are real here. MySQL's (``XA START`` … ``XA END``, an ``XA_PREPARE_LOG_EVENT``,
later ``XA COMMIT``) are fed to the reader as library events built from the documented layout.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pymysqlreplication.event import QueryEvent, XAPrepareEvent, XidEvent

from binlake.config import SourceConfig
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.binlog.event_rows import EventRows, Gap
from binlake.source.binlog.scan import transactions
from binlake.source.binlog.xa import PreparedXa, XaError, XaLocator, Xid, xa_statement
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import connect, server_version
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import source_config


@pytest.mark.parametrize(
    ("text", "verb", "xid", "one_phase"),
    [
        ("XA COMMIT X'7831',X'',1", "commit", Xid(1, b"x1", b""), False),
        ("XA ROLLBACK X'6162',X'6364',7", "rollback", Xid(7, b"ab", b"cd"), False),
        ("XA START X'7831',X'',1", "start", Xid(1, b"x1", b""), False),
        ("xa commit 'x1' one phase", "commit", Xid(1, b"x1", b""), True),
        ("XA END 'it''s'", "end", Xid(1, b"it's", b""), False),
    ],
)
def test_xa_statements_as_servers_write_them(text: str, verb: str, xid: Xid, one_phase: bool) -> None:
    found = xa_statement(text)
    assert found is not None
    assert (found.verb, found.xid, found.one_phase) == (verb, xid, one_phase)
    assert Xid.parse(str(xid)) == xid


@pytest.mark.parametrize("text", ["XACT", "SELECT 1", "XA RECOVER", "XA COMMIT nonsense!"])
def test_other_statements_are_not_xa(text: str) -> None:
    assert xa_statement(text) is None


def _head(server: PrivateMariaDB) -> BinlogOffset:
    with contextlib.closing(server.admin_connection()) as conn:
        at = current_offset(conn, server_version(conn))
    return BinlogOffset(at.file, at.pos)


@contextlib.contextmanager
def _session(server: PrivateMariaDB, database: str) -> Iterator[Any]:
    with contextlib.closing(server.admin_connection(database)) as conn, conn.cursor() as cur:
        yield cur


def _prepare(server: PrivateMariaDB, database: str, xid: str, *statements: str) -> None:
    """Prepare an XA transaction and disconnect (MariaDB then lets any session decide it)."""
    with _session(server, database) as cur:
        cur.execute(f"XA START '{xid}'")
        for statement in statements:
            cur.execute(statement)
        cur.execute(f"XA END '{xid}'")
        cur.execute(f"XA PREPARE '{xid}'")
    time.sleep(0.1)


@pytest.fixture
def xa(mariadb: PrivateMariaDB, database: str) -> dict[str, Any]:
    """A table, then: p1 prepared, a plain insert, p2 prepared, a rotation, p1 committed, p2 rolled
    back, p3 prepared and committed in one phase, p4 prepared and left so."""
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
        database=database,
    )
    marks = {"start": _head(mariadb)}
    _prepare(mariadb, database, "p1", "UPDATE t SET v = 'xa' WHERE id = 1", "INSERT INTO t VALUES (10, 'p1')")
    marks["after_p1"] = _head(mariadb)
    mariadb.execute("INSERT INTO t VALUES (3, 'plain')", database=database)
    _prepare(mariadb, database, "p2", "DELETE FROM t WHERE id = 2")
    mariadb.execute("FLUSH BINARY LOGS")
    marks["after_rotation"] = _head(mariadb)
    mariadb.execute("XA COMMIT 'p1'", "XA ROLLBACK 'p2'", database=database)
    marks["committed"] = _head(mariadb)
    with _session(mariadb, database) as cur:
        cur.execute("XA START 'p3'")
        cur.execute("INSERT INTO t VALUES (30, 'one phase')")
        cur.execute("XA END 'p3'")
        cur.execute("XA COMMIT 'p3' ONE PHASE")
    _prepare(mariadb, database, "p4", "INSERT INTO t VALUES (40, 'never decided')")
    marks["end"] = _head(mariadb)
    yield marks
    mariadb.execute("XA ROLLBACK 'p4'", database=database)


def _changes(server: PrivateMariaDB, database: str, start: BinlogOffset, end: BinlogOffset) -> list[Any]:
    source = source_config(server, database)
    with contextlib.closing(connect(source)) as conn:
        (schema,) = discover(conn, [TableId(database, "t")])
    converter = RowConverter(schema)
    reader = BinlogReader(source, 6501, start, end, {TableId(database, "t")}, lambda _: converter)
    return [(c.op, c.before, c.after, c.offset) for c in reader.changes()]


def test_xa_rows_count_at_their_commit(mariadb: PrivateMariaDB, database: str, xa: dict[str, Any]) -> None:
    changes = _changes(mariadb, database, xa["start"], xa["end"])
    plain, *committed = changes
    assert plain[:3] == ("insert", None, {"id": 3, "v": "plain"})
    # p1's two changes, at XA COMMIT; p2 rolled back (row 2 stays); p4 never decided.
    assert [c[:3] for c in committed[:2]] == [
        ("update", {"id": 1, "v": "a"}, {"id": 1, "v": "xa"}),
        ("insert", None, {"id": 10, "v": "p1"}),
    ]
    assert {c[3] for c in committed[:2]} == {committed[0][3]}
    assert xa["after_rotation"] < committed[0][3] <= xa["committed"]
    assert [c[:3] for c in committed[2:]] == [("insert", None, {"id": 30, "v": "one phase"})]


def test_a_commit_whose_prepare_came_before_the_start_finds_it(
    mariadb: PrivateMariaDB, database: str, xa: dict[str, Any]
) -> None:
    # Read from after the rotation: p1 was prepared a file earlier.
    changes = _changes(mariadb, database, xa["after_rotation"], xa["committed"])
    assert [c[:3] for c in changes] == [
        ("update", {"id": 1, "v": "a"}, {"id": 1, "v": "xa"}),
        ("insert", None, {"id": 10, "v": "p1"}),
    ]
    # Read from between p1's prepare and the rotation: the same.
    assert _changes(mariadb, database, xa["after_p1"], xa["committed"])[1:] == changes


def test_boundaries_mark_prepares_commits_and_rollbacks(
    mariadb: PrivateMariaDB, database: str, xa: dict[str, Any]
) -> None:
    found = list(transactions(source_config(mariadb, database), 6502, xa["start"], xa["end"]))
    marks = [(b.xa.verb, b.xa.xid.gtrid) for b in found if b.xa is not None]
    assert marks == [
        ("prepare", b"p1"), ("prepare", b"p2"), ("commit", b"p1"), ("rollback", b"p2"), ("prepare", b"p4"),
    ]  # fmt: skip
    first = next(b for b in found if b.xa is not None)
    assert first.xa is not None
    assert first.xa.start == xa["start"]
    assert all(b.statement is None for b in found)  # XA statements are not DDL


def test_a_purged_prepare_is_a_clear_error() -> None:
    locator = XaLocator(lambda start, end: [], lambda: [("binlog.000007", 1000)])
    with pytest.raises(XaError, match=r"XA COMMIT X'6131',X'',1.*binlog.000007.*backfill"):
        locator.find(Xid(1, b"a1", b""), BinlogOffset("binlog.000007", 500))


def test_the_last_prepare_before_the_commit_counts() -> None:
    xid = Xid(1, b"again", b"")
    early = PreparedXa(xid, BinlogOffset("b.000001", 4), BinlogOffset("b.000001", 100))
    later = PreparedXa(xid, BinlogOffset("b.000002", 4), BinlogOffset("b.000002", 100))
    locator = XaLocator(lambda start, end: [], lambda: [], known=[early, later])
    assert locator.find(xid, BinlogOffset("b.000001", 500)) == early
    assert locator.find(xid, BinlogOffset("b.000003", 5)) == later


# -- MySQL's XA groups and statements, as library events --------------------------------------------


def _event(kind: type, **fields: Any) -> Any:
    event = object.__new__(kind)
    event.timestamp = fields.pop("timestamp", 1_700_000_000)
    for name, value in fields.items():
        setattr(event, name, value)
    return event


class _RowsEvent:
    """Stands for a rows event of ``d.t``: the test reader turns it into one insert."""

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.schema, self.table, self.row, self.timestamp = "d", "t", row, 1_700_000_000


class _Stream:
    """Events at consecutive positions, as ``BinLogStreamReader`` hands them out."""

    def __init__(self, events: list[Any]) -> None:
        self.events, self.log_file, self.log_pos = events, "binlog.000001", 4

    def __iter__(self) -> Iterator[Any]:
        for event in self.events:
            self.log_pos += 100
            yield event


class _Reader(BinlogReader):
    def _event_rows(self, event: Any, table: TableId, offset: BinlogOffset) -> EventRows:
        return EventRows(table, "insert", [event.row], offset, event.timestamp)


def _read(events: list[Any]) -> list[Any]:
    source = SourceConfig(hostname="h", username="u", tables=["d\\..*"])
    reader = _Reader(source, 1, BinlogOffset("binlog.000001", 4), None, {TableId("d", "t")}, lambda _: None)  # type: ignore[arg-type,return-value]
    return list(reader._read(_Stream(events)))  # type: ignore[arg-type]


def _prepare_event(xid: bytes, one_phase: bool = False) -> Any:
    return _event(XAPrepareEvent, one_phase=one_phase, xid_format_id=1, xid_gtrid=xid, xid_bqual=b"")


def test_mysql_xa_groups_count_at_their_commit() -> None:
    found = _read([
        _event(QueryEvent, query="XA START X'6131',X'',1", schema=b"d"),
        _RowsEvent((1,)),
        _event(QueryEvent, query="XA END X'6131',X'',1", schema=b"d"),
        _prepare_event(b"a1"),
        _event(QueryEvent, query="BEGIN", schema=b"d"),
        _RowsEvent((2,)),
        _event(XidEvent),
        _event(QueryEvent, query="XA START X'6132',X'',1", schema=b"d"),
        _RowsEvent((3,)),
        _event(QueryEvent, query="XA END X'6132',X'',1", schema=b"d"),
        _prepare_event(b"a2", one_phase=True),  # XA COMMIT … ONE PHASE
        _event(QueryEvent, query="XA COMMIT X'6131',X'',1", schema=b"d", timestamp=1_800_000_000),
    ])  # fmt: skip
    assert [(e.images, e.offset.pos) for e in found] == [([(2,)], 604), ([(3,)], 1104), ([(1,)], 1204)]
    assert found[-1].timestamp == 1_800_000_000


def test_rows_logged_as_statements_are_gaps_of_the_tables_they_write() -> None:
    found = _read([
        _event(QueryEvent, query="BEGIN", schema=b"d"),
        _event(QueryEvent, query="INSERT INTO t VALUES (1)", schema=b"d"),
        _event(QueryEvent, query="UPDATE other SET x = 1", schema=b"d"),  # not captured
        _event(QueryEvent, query="DELETE FROM d.t WHERE id = 1", schema=b"elsewhere"),
        _event(XidEvent),
        _event(QueryEvent, query="INSERT INTO t VALUES (2)", schema=b"d"),  # outside a transaction
    ])  # fmt: skip
    assert [type(e) for e in found] == [Gap, Gap]
    assert [(e.table, e.offset.pos) for e in found] == [(TableId("d", "t"), 204), (TableId("d", "t"), 404)]
    assert "binlog_format" in found[0].reason
    assert "SET SESSION binlog_format = 'ROW'" in found[0].fix
