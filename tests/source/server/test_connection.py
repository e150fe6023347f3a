"""Server version parsing (MySQL and MariaDB version strings) and connection error texts."""

from __future__ import annotations

import pytest

from binlake.source.server.connection import ServerVersion, _connection_message


@pytest.mark.parametrize(
    ("text", "flavor", "number"),
    [
        ("10.11.19-MariaDB-0+deb12u1-log", "mariadb", (10, 11, 19)),
        ("5.5.5-10.6.12-MariaDB", "mariadb", (10, 6, 12)),
        ("8.4.3", "mysql", (8, 4, 3)),
        ("8.0.36-0ubuntu0.22.04.1", "mysql", (8, 0, 36)),
        ("5.7.44-log", "mysql", (5, 7, 44)),
    ],
)
def test_version_parse(text: str, flavor: str, number: tuple[int, int, int]) -> None:
    version = ServerVersion.parse(text)
    assert version.flavor == flavor
    assert version.number == number


def test_unreadable_version() -> None:
    with pytest.raises(ValueError, match="cannot read a version"):
        ServerVersion.parse("banana")


def test_messages_name_what_where_and_fix() -> None:
    refused = _connection_message(2003, "Connection refused", "db:3306", "cdc", None)
    assert "db:3306" in refused
    assert "unreachable" in refused
    assert "Fix:" in refused
    denied = _connection_message(1045, "Access denied for user 'cdc'", "db:3306", "cdc", None)
    assert "access denied" in denied
    assert "`source.password`" in denied
    host = _connection_message(1130, "Host 'x' is not allowed", "db:3306", "cdc", None)
    assert "CREATE USER 'cdc'@'<host>'" in host
