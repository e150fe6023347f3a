"""Binlog offsets: a position in the source's binary log, totally ordered across file rotation.

A binlog file is ``<basename>.<sequence number>``; the server only ever appends to the newest
file, so (sequence number, position) orders every event of one server. The GTID set (MySQL) or
GTID position (MariaDB) read alongside is carried for resuming on another server, not for ordering.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import total_ordering
from typing import Any

_FILE = re.compile(r"^(?P<base>.+)\.(?P<seq>\d+)$")


class OffsetError(ValueError):
    """An offset that cannot be read or compared."""


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
