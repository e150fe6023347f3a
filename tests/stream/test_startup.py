"""GTID sets for `specific-offset` starts."""

from __future__ import annotations

import pytest

from binlake.offsets import GtidError, gtid_matcher


def test_mariadb_gtid_positions_match_by_domain_and_sequence() -> None:
    contains = gtid_matcher("0-1-42,1-1-7")
    assert contains("0-1-42")
    assert contains("0-2-3")
    assert not contains("0-1-43")
    assert contains("1-1-7")
    assert not contains("1-1-8")
    assert not contains("2-1-1")


def test_mysql_gtid_sets_match_by_uuid_and_interval() -> None:
    uuid = "3E11FA47-71CA-11E1-9E33-C80AA9429562"
    contains = gtid_matcher(f"{uuid}:1-5:9")
    assert contains(f"{uuid.lower()}:3")
    assert contains(f"{uuid}:9")
    assert not contains(f"{uuid}:6")
    assert not contains("aaaaaaaa-71ca-11e1-9e33-c80aa9429562:3")


def test_a_malformed_gtid_is_refused() -> None:
    with pytest.raises(GtidError, match="neither a MariaDB GTID"):
        gtid_matcher("nonsense")
