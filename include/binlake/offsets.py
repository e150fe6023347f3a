"""Binlog offsets: a position in the source's binary log, totally ordered across file rotation.

A binlog file is ``<basename>.<sequence number>``; the server only ever appends to the newest
file, so (sequence number, position) orders every event of one server. The GTID set (MySQL) or
GTID position (MariaDB) read alongside is carried for resuming on another server, not for ordering.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import total_ordering
from typing import Any

_FILE = re.compile(r"^(?P<base>.+)\.(?P<seq>\d+)$")


class OffsetError(ValueError):
    """An offset that cannot be read or compared."""


class GtidError(ValueError):
    """A GTID set that cannot be read."""


@total_ordering
@dataclass(frozen=True)
class BinlogOffset:
    """A binlog file and position (the position *after* an event), plus the GTID state there."""

    file: str
    pos: int
    gtid: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not _FILE.match(self.file):
            raise OffsetError(f"`{self.file}` is not a binlog file name (`<name>.<number>`)")
        if self.pos < 0:
            raise OffsetError(f"binlog position must not be negative, got {self.pos}")

    @property
    def sequence(self) -> int:
        match = _FILE.match(self.file)
        assert match is not None  # checked in __post_init__
        return int(match.group("seq"))

    def _key(self) -> tuple[int, int]:
        return (self.sequence, self.pos)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BinlogOffset):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        gtid = f" (gtid {self.gtid})" if self.gtid else ""
        return f"{self.file}:{self.pos}{gtid}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos, "gtid": self.gtid}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BinlogOffset:
        return cls(str(data["file"]), int(data["pos"]), data.get("gtid"))


_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


def gtid_matcher(gtid_set: str) -> Callable[[str], bool]:
    """A test of whether a transaction's GTID is in ``gtid_set``.

    MariaDB positions (``0-1-42,1-1-7``): same domain, sequence number at or below. MySQL sets
    (``uuid:1-100:200,uuid2:5``): same source uuid, number inside an interval.
    """
    parts = [p.strip() for p in gtid_set.split(",") if p.strip()]
    mariadb: dict[int, int] = {}
    mysql: dict[str, list[tuple[int, int]]] = {}
    for part in parts:
        match = _MARIADB_GTID.match(part)
        if match:
            mariadb[int(match.group(1))] = int(match.group(3))
            continue
        uuid, *intervals = part.split(":")
        if not intervals:
            raise GtidError(
                f"`{part}` is neither a MariaDB GTID (`0-1-42`) nor a MySQL GTID set (`uuid:1-42`)"
            )
        for interval in intervals:
            low, _, high = interval.partition("-")
            mysql.setdefault(uuid.lower(), []).append((int(low), int(high or low)))

    def contains(gtid: str) -> bool:
        match = _MARIADB_GTID.match(gtid)
        if match:
            limit = mariadb.get(int(match.group(1)))
            return limit is not None and int(match.group(3)) <= limit
        uuid, _, number = gtid.rpartition(":")
        return any(low <= int(number) <= high for low, high in mysql.get(uuid.lower(), []))

    return contains
