"""``STR_TO_DATE`` against the server: texts of dates and times in many layouts, and the ways
people's data goes wrong (spaces and tabs, one-digit parts, missing or extra parts, signs, AM/PM
spelled otherwise, out-of-range parts, days past the month's end, non-ASCII, empty), read by each
format the server (one round trip) and binlake. Where the server returns a date, binlake returns
the same; where NULL, NULL; where a date no lake type holds (a zero part, April 31st), binlake stops."""

from __future__ import annotations

import contextlib
import datetime as dt
import random
from typing import Any

import pyarrow as pa
import pytest

from binlake.events import CreateTable, TableId
from binlake.schema.transform_eval import TransformInexactError
from binlake.schema.transforms import TransformError, TransformSpec, compile_transform
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.schema.test_transforms import arrow_rows, source

FORMATS = [
    "%Y-%m-%d",
    "%d/%m/%Y",
    "%Y%m%d",
    "%y-%c-%e",
    "%Y %m %d",
    "%Y-%m-%d %H:%i:%s",
    "%d.%m.%Y %H:%i",
    "%Y-%m-%d %T",
    "%m/%d/%Y %r",
    "%m/%d/%Y %h:%i %p",
    "%Y-%m-%d %H:%i:%s.%f",
    "%Y-%m-%dT%H:%i:%sZ",
    "%e/%c/%y %k:%i",
    "%Y-%m-%d %l:%i:%S %p",
    "%Y-%m-%d %I%p",
    "%d-%m-%Y, %H.%i",
    "%Y-%m-%d %H:%i:%s.%f UTC",
]

_LAYOUTS = [
    "{Y:04d}-{m:02d}-{d:02d}",
    "{d:02d}/{m:02d}/{Y:04d}",
    "{Y:04d}{m:02d}{d:02d}",
    "{y:02d}-{m}-{d}",
    "{Y} {m} {d}",
    "{Y:04d}-{m:02d}-{d:02d} {H:02d}:{i:02d}:{s:02d}",
    "{d}.{m}.{Y} {H}:{i}",
    "{Y:04d}-{m:02d}-{d:02d} {H:02d}:{i:02d}:{s:02d}.{f}",
    "{m:02d}/{d:02d}/{Y} {h:02d}:{i:02d}:{s:02d} {p}",
    "{m}/{d}/{Y} {h}:{i:02d} {p}",
    "{Y:04d}-{m:02d}-{d:02d}T{H:02d}:{i:02d}:{s:02d}Z",
    "{d}/{m}/{y:02d} {H}:{i:02d}",
    "{Y}-{m:02d}-{d:02d} {h}:{i:02d}:{s:02d} {p}",
    "{Y}-{m:02d}-{d:02d} {h:02d}{p}",
    "{d:02d}-{m:02d}-{Y}, {H}.{i:02d}",
]

_ODD = [
    "",
    " ",
    "2024-05",
    "2024",
    "2024-05-17 extra",
    "  2024-05-17  ",
    "2024-5-7",
    "2024-13-01",
    "2024-04-31",
    "2024-02-30",
    "0000-00-00",
    "2024-00-10",
    "2024-05-00",
    "-2024-05-17",
    "+2024-05-17",
    "2024/05/17",
    "17/05/2024 23:59",
    "05/17/2024 12:00:00 AM",
    "05/17/2024 12:00:00 pm",
    "05/17/2024 13:00:00 PM",
    "05/17/2024 00:30 AM",
    "05/17/2024 7:05 XM",
    "2024-05-17 24:00:00",
    "2024-05-17 23:60:00",
    "99-1-1",
    "69-12-31",
    "70-1-1",
    "5-1-1",
    "2024-05-17T08:09:10",
    "2024-05-17 08:09:10.1",
    "2024-05-17 08:09:10.1234567",
    "2024-05-17 08:09:10.",
    "2024-05-17\t08:09:10",
    "2024-05-17\n08:09:10",
    "２０２４-05-17",
    "2024-05-17 ü",
    "2024-05-17 1:2:3",
    "2024 - 05 - 17",
    "20240517",
    "2024051",
    "240517",
    "2024-05-17 11AM",
    "2024-05-17 11 am",
    "17-05-2024, 9.30",
    "1/1/70 0:00",
    "0001-01-01",
    "9999-12-31 23:59:59.999999 UTC",
    "2024-05-17 08:09:10.5 utc",
    "2024-05-17 08:09:10.000001 UTC extra",
    "2024-05-17  08:09:10",
    "2024-05-17 08: 09:10",
]


def _texts(rng: random.Random) -> list[str | None]:
    texts: list[str | None] = [None, *_ODD]
    for _ in range(240):
        moment = dt.datetime(1000, 1, 1) + dt.timedelta(
            days=rng.randint(0, 9000 * 365),
            seconds=rng.randint(0, 86399),
            microseconds=rng.randint(0, 999_999),
        )
        fields = {
            "Y": moment.year, "y": moment.year % 100, "m": moment.month, "d": moment.day,
            "H": moment.hour, "i": moment.minute, "s": moment.second,
            "f": f"{moment.microsecond:06d}"[: rng.randint(1, 6)], "h": (moment.hour + 11) % 12 + 1,
            "p": rng.choice(["am", "Pm", "XM"]) if rng.random() < 0.2 else "AM" if moment.hour < 12 else "PM",
        }  # fmt: skip
        texts.append(rng.choice(_LAYOUTS).format(**fields))
    return texts


@pytest.fixture
def table(mariadb: PrivateMariaDB, database: str) -> CreateTable:
    texts = _texts(random.Random(20261127))
    mariadb.execute(
        "CREATE TABLE s2d (id INT PRIMARY KEY, s VARCHAR(60) COLLATE utf8mb4_bin)", database=database
    )
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO s2d VALUES (%s, %s)", list(enumerate(texts, 1)))
        conn.commit()
        return discover(conn, [TableId(database, "s2d")])[0]


def test_str_to_date_equals_the_servers_or_stops_where_no_date_holds_it(
    mariadb: PrivateMariaDB, table: CreateTable
) -> None:
    rows = arrow_rows(mariadb, table)
    projection = ", ".join(f"STR_TO_DATE(s, '{f}')" for f in FORMATS)
    theirs = source(mariadb, table, f"SELECT id, {projection} FROM t ORDER BY id")
    differing: dict[str, list[tuple[Any, Any, Any]]] = {}
    stops = 0
    for i, fmt in enumerate(FORMATS):
        transform = compile_transform(TransformSpec(f"id, s, STR_TO_DATE(s, '{fmt}') AS r"), table)
        for n, expected in enumerate(theirs):
            row = rows.slice(n, 1)
            server = expected[i + 1]
            try:
                ours: Any = transform.project(row).column("r")[0].as_py()
            except TransformInexactError:
                ours = "stops"
                stops += 1
            if isinstance(server, str):  # a date pymysql could not make: a zero part, or April 31st
                server = "stops"
            if ours != server:
                differing.setdefault(fmt, []).append((row.column("s")[0].as_py(), ours, server))
    assert not differing, {f: found[:4] for f, found in differing.items()}
    assert stops > 10  # the test reaches the dates no lake type holds
    found = {type(v) for r in theirs for v in r[1:]}
    assert {dt.date, dt.datetime, type(None)} <= found


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("STR_TO_DATE(s, '%d %M %Y')", "%M"),  # month names: the server matches prefixes
        ("STR_TO_DATE(s, '%Y-%m-%d %%')", "%%"),
        ("STR_TO_DATE(s, '%H:%i:%s')", "a TIME"),
        ("STR_TO_DATE(id, '%Y%m%d')", "not text"),
        ("STR_TO_DATE(s, s)", "not a constant"),
        ("STR_TO_DATE(s, '%x-%v')", "%v"),
    ],
)
def test_what_binlake_cannot_read_as_the_server_is_refused(
    table: CreateTable, expression: str, reason: str
) -> None:
    with pytest.raises(TransformError, match=reason):
        compile_transform(TransformSpec(f"id, {expression} AS r"), table)


def test_a_filter_on_a_parsed_date(mariadb: PrivateMariaDB, table: CreateTable) -> None:
    rows = arrow_rows(mariadb, table)
    where = "STR_TO_DATE(s, '%Y-%m-%d %H:%i:%s') >= '2000-01-01 00:00:00'"
    shaped = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$"  # whole dates (a zero part stops)
    rows = rows.filter(pa.compute.match_substring_regex(rows.column("s"), shaped))
    kept = compile_transform(TransformSpec("id", where), table).keep(rows)
    ours = sorted(rows.filter(kept).column("id").to_pylist())
    theirs = sorted(
        r[0] for r in source(mariadb, table, f"SELECT id FROM t WHERE s REGEXP '{shaped}' AND {where}")
    )
    assert ours == theirs
    assert 0 < len(ours) < rows.num_rows  # some kept, some not (earlier, or a NULL: hour 24)
