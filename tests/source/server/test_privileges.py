"""SHOW GRANTS parsing, without a server (the real-server cases are in test_validator.py)."""

from __future__ import annotations

from binlake.source.server.privileges import Grants


def test_global_grants_with_mariadb_alias() -> None:
    grants = Grants.parse(
        [
            "GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cdc`@`%` "
            "IDENTIFIED BY PASSWORD '*3EAF21C3EF730C69459982A10E340C99634B6301'"
        ]
    )
    assert grants.global_privs == {
        "SELECT",
        "RELOAD",
        "SHOW DATABASES",
        "REPLICATION SLAVE",
        "REPLICATION CLIENT",
    }
    assert grants.can_select("any", "table")


def test_all_privileges_covers_everything() -> None:
    grants = Grants.parse(["GRANT ALL PRIVILEGES ON *.* TO 'root'@'localhost' WITH GRANT OPTION"])
    assert grants.has_global("REPLICATION SLAVE")
    assert grants.can_select("shop", "orders")


def test_database_table_and_column_level_grants() -> None:
    grants = Grants.parse(
        [
            "GRANT USAGE ON *.* TO `u`@`h`",
            "GRANT SELECT ON `shop`.* TO `u`@`h`",
            "GRANT SELECT (`id`, `total`), INSERT ON `crm`.`leads` TO `u`@`h`",
            "GRANT INSERT ON `crm`.`notes` TO `u`@`h`",
            "GRANT `analyst` TO `u`@`h`",  # a role: no object privileges of its own
        ]
    )
    assert not grants.has_global("REPLICATION SLAVE")
    assert grants.can_select("shop", "orders")
    assert grants.can_select("crm", "leads")
    assert not grants.can_select("crm", "notes")
    assert not grants.can_select("other", "t")


def test_wildcard_database_grants_follow_like_semantics() -> None:
    grants = Grants.parse(["GRANT SELECT ON `shop\\_%`.* TO `u`@`h`", "GRANT SELECT ON `a_c`.* TO `u`@`h`"])
    assert grants.can_select("shop_1", "orders")
    assert not grants.can_select("shopx1", "orders")  # escaped _ is a literal underscore
    assert grants.can_select("abc", "t")  # unescaped _ matches one character
    assert not grants.can_select("shop", "orders")


def test_backquoted_names_with_dots_and_backquotes() -> None:
    grants = Grants.parse(["GRANT SELECT ON `we.ird`.`ta``ble` TO `u`@`h`"])
    assert grants.can_select("we.ird", "ta`ble")
