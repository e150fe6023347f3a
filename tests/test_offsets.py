"""BinlogOffset: totally ordered across file rotation; GTIDs ride along without affecting order."""

from __future__ import annotations

import pytest

from binlake.offsets import BinlogOffset, OffsetError


def test_order_across_rotation() -> None:
    offsets = [
        BinlogOffset("binlog.000010", 4),
        BinlogOffset("binlog.000002", 99_999),
        BinlogOffset("binlog.000009", 120),
        BinlogOffset("binlog.000009", 7),
        BinlogOffset("binlog.1000000", 4),  # the sequence outgrows six digits
    ]
    assert [str(o) for o in sorted(offsets)] == [
        "binlog.000002:99999",
        "binlog.000009:7",
        "binlog.000009:120",
        "binlog.000010:4",
        "binlog.1000000:4",
    ]


def test_equality_ignores_gtid_and_round_trips() -> None:
    a = BinlogOffset("mysql-bin.000003", 154, "0-1-42")
    assert a == BinlogOffset("mysql-bin.000003", 154)
    assert BinlogOffset.from_dict(a.to_dict()) == a
    assert BinlogOffset.from_dict(a.to_dict()).gtid == "0-1-42"
    assert str(a) == "mysql-bin.000003:154 (gtid 0-1-42)"
    assert a <= a
    assert not a < a


@pytest.mark.parametrize(("file", "pos"), [("binlog", 4), ("binlog.abc", 4), ("binlog.000001", -1)])
def test_invalid_offsets(file: str, pos: int) -> None:
    with pytest.raises(OffsetError):
        BinlogOffset(file, pos)


def test_one_packed_form_sorts_as_offsets_do() -> None:
    from binlake.offsets import packed_text

    offsets = [
        BinlogOffset("binlog.000002", 4),
        BinlogOffset("binlog.000001", 2**31),
        BinlogOffset("binlog.000010", 0),
    ]
    assert sorted(offsets, key=lambda o: o.packed) == sorted(offsets)
    for offset in offsets:
        assert BinlogOffset.unpacked(offset.file, offset.packed) == offset
    assert packed_text(BinlogOffset("binlog.000003", 77).packed) == "3:77"
