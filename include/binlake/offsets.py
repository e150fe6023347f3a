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
#: The position's bits of a packed offset (``BinlogOffset.packed``): the file number lies above.
POS_BITS = 32
POS_MASK = (1 << POS_BITS) - 1


def packed_text(packed: int) -> str:
    """A packed offset for people: ``<file number>:<position>``."""
    return f"{packed >> POS_BITS}:{packed & POS_MASK}"


def packed_files(packed: Any, base: str) -> Any:
    """The binlog file names (``<base>.000123``: MySQL's six digits) of packed offsets, an Arrow
    array of them (``BinlogOffset.packed``), as Arrow strings."""
    import pyarrow as pa  # here: most importers of this module never need Arrow
    import pyarrow.compute as pc

    numbers = pc.cast(pc.shift_right(pc.cast(packed, pa.int64()), POS_BITS), pa.string())
    return pc.binary_join_element_wise(f"{base}.", pc.utf8_lpad(numbers, 6, "0"), "")


def packed_positions(packed: Any) -> Any:
    """The positions within their files of packed offsets (an Arrow array of them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.bit_wise_and(pc.cast(packed, pa.int64()), POS_MASK)


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

    @property
    def packed(self) -> int:
        """The offset as one sortable integer: file number << 32 | position (positions stay below
        2^32: ``max_binlog_size`` is at most 1 GiB). The change tables' ``at`` column, the state
        store's sortable columns and the snapshot's watermarks compare these."""
        return self.sequence << POS_BITS | self.pos

    @classmethod
    def unpacked(cls, file: str, packed: int) -> BinlogOffset:
        """The offset ``packed`` stands for, in ``file`` (the packed form keeps only its number)."""
        return cls(file, packed & POS_MASK)

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


@dataclass
class GtidSet:
    """A set of transactions by GTID: MariaDB's position (per domain, the last sequence number
    and the server that wrote it: ``0-1-42,1-2-7``) or a MySQL GTID set (per source uuid,
    intervals of transaction numbers: ``uuid:1-100:200``). ``add`` extends it with one more
    transaction in binlog order; ``str`` writes it back in the server's own syntax."""

    mariadb: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Domain → (server id, sequence number)."""
    mysql: dict[str, list[list[int]]] = field(default_factory=dict)
    """Source uuid (lower case) → sorted, disjoint intervals [low, high]."""

    @classmethod
    def parse(cls, text: str) -> GtidSet:
        found = cls()
        for part in (p.strip() for p in text.replace("\n", "").split(",")):
            if not part:
                continue
            match = _MARIADB_GTID.match(part)
            if match:
                found.mariadb[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
                continue
            uuid, *intervals = part.split(":")
            if not intervals or not all(re.fullmatch(r"\d+(-\d+)?", i) for i in intervals):
                raise GtidError(
                    f"`{part}` is neither a MariaDB GTID (`0-1-42`) nor a MySQL GTID set (`uuid:1-42`)"
                )
            for interval in intervals:
                low, _, high = interval.partition("-")
                found._add_interval(uuid.lower(), int(low), int(high or low))
        return found

    def add(self, gtid: str) -> None:
        """One more transaction, in binlog order."""
        match = _MARIADB_GTID.match(gtid)
        if match:
            self.mariadb[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
            return
        uuid, _, number = gtid.rpartition(":")
        self._add_interval(uuid.lower(), int(number), int(number))

    def _add_interval(self, uuid: str, low: int, high: int) -> None:
        merged = sorted([*self.mysql.get(uuid, []), [low, high]])
        out: list[list[int]] = []
        for interval in merged:
            if out and interval[0] <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], interval[1])
            else:
                out.append(list(interval))
        self.mysql[uuid] = out

    def __contains__(self, gtid: object) -> bool:
        if not isinstance(gtid, str):
            return False
        match = _MARIADB_GTID.match(gtid)
        if match:
            last = self.mariadb.get(int(match.group(1)))
            return last is not None and int(match.group(3)) <= last[1]
        uuid, _, number = gtid.rpartition(":")
        return any(low <= int(number) <= high for low, high in self.mysql.get(uuid.lower(), []))

    def __str__(self) -> str:
        parts = [f"{d}-{server}-{seq}" for d, (server, seq) in sorted(self.mariadb.items())]
        for uuid, intervals in sorted(self.mysql.items()):
            spans = ":".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in intervals)
            parts.append(f"{uuid}:{spans}")
        return ",".join(parts)

    def copy(self) -> GtidSet:
        return GtidSet(dict(self.mariadb), {u: [list(i) for i in v] for u, v in self.mysql.items()})


def gtid_matcher(gtid_set: str) -> Callable[[str], bool]:
    """A test of whether a transaction's GTID is in ``gtid_set``.

    MariaDB positions (``0-1-42,1-1-7``): same domain, sequence number at or below. MySQL sets
    (``uuid:1-100:200,uuid2:5``): same source uuid, number inside an interval.
    """
    return GtidSet.parse(gtid_set).__contains__
