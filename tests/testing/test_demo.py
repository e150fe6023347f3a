"""The demo shop database and the workload generator."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload

ROWS = 3000


@pytest.fixture
def shop(mariadb: PrivateMariaDB, database: str) -> Iterator[str]:
    demo.load(mariadb.admin_connection, ROWS, database=database)
    return database


def _checksums(server: PrivateMariaDB, database: str) -> dict[str, int]:
    tables = ", ".join(f"`{database}`.`{t}`" for t in demo.COLUMNS)
    return {str(name): int(value) for name, value in server.query(f"CHECKSUM TABLE {tables}")}


def test_load_gives_the_requested_rows_per_table(mariadb: PrivateMariaDB, shop: str) -> None:
    size = demo.DemoSize.for_rows(ROWS)
    assert size.total == ROWS
    for table in demo.COLUMNS:
        count = mariadb.query(f"SELECT COUNT(*) FROM `{shop}`.`{table}`")[0][0]
        assert count == getattr(size, table), table


def test_schema_covers_every_mapped_type(mariadb: PrivateMariaDB, shop: str) -> None:
    types = {
        str(t).lower()
        for (t,) in mariadb.query(
            "SELECT DISTINCT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s", (shop,)
        )
    }
    wanted = [
        "tinyint(1)",
        "tinyint(3) unsigned",
        "tinyint(4)",
        "smallint(6)",
        "smallint(5) unsigned",
        "mediumint(9)",
        "mediumint(8) unsigned",
        "int(11)",
        "int(10) unsigned",
        "bigint(20)",
        "bigint(20) unsigned",
        "decimal(10,2)",
        "decimal(5,4)",
        "float",
        "double",
        "date",
        "datetime(6)",
        "datetime(3)",
        "timestamp(6)",
        "timestamp",
        "time",
        "time(3)",
        "year(4)",
        "char(2)",
        "varchar(100)",
        "text",
        "blob",
        "binary(16)",
        "varbinary(32)",
        "bit(8)",
        "longtext",  # JSON is LONGTEXT on MariaDB
    ]
    assert [t for t in wanted if t not in types] == []
    assert any(t.startswith("enum(") for t in types)
    assert any(t.startswith("set(") for t in types)
    # The view exists but is not a base table; one table has no primary key; one a composite key.
    kinds = dict(
        mariadb.query(
            "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (shop,)
        )
    )
    assert kinds["order_totals"] == "VIEW"
    keys = mariadb.query(
        "SELECT TABLE_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION) FROM "
        "information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s AND CONSTRAINT_NAME = 'PRIMARY' "
        "GROUP BY TABLE_NAME",
        (shop,),
    )
    assert dict(keys)["order_items"] == "order_id,line_no"
    assert "page_views" not in dict(keys)
    assert dict(keys)["coupons"] == "code"


def test_edge_values_are_present(mariadb: PrivateMariaDB, shop: str) -> None:
    q = lambda sql: mariadb.query(sql, database=shop)[0]  # noqa: E731
    # gift card keys all above 2^63; BIGINT UNSIGNED values near 2^64 - 1.
    assert q("SELECT MIN(card_number) >= 9223372036854775808 FROM gift_cards") == (1,)
    assert q("SELECT MAX(external_ref) >= 18446744073709550615 FROM orders") == (1,)
    # TIME values below zero and above 24 h; emoji in utf8mb4 text; NULL chunk keys.
    assert q("SELECT MIN(delivery_window) < 0, MAX(delivery_window) > '24:00:00' FROM orders") == (1, 1)
    assert q("SELECT COUNT(*) > 0 FROM customers WHERE full_name LIKE '%🚀%'") == (1,)
    assert q("SELECT COUNT(*) > 0 FROM page_views WHERE customer_id IS NULL") == (1,)
    # Coupon codes differ in case; they are still unique under the case-insensitive collation.
    assert q("SELECT COUNT(DISTINCT BINARY code) = COUNT(DISTINCT code) FROM coupons") == (1,)
    assert q("SELECT COUNT(*) FROM coupons WHERE code <> LOWER(code) COLLATE utf8mb4_bin")[0] > 0


def test_load_is_deterministic(mariadb: PrivateMariaDB, shop: str) -> None:
    other = f"{shop}_again"
    try:
        demo.load(mariadb.admin_connection, ROWS, database=other)
        first, second = _checksums(mariadb, shop), _checksums(mariadb, other)
        # updated_at/issued_at have no server-side defaults in play: the data is equal table by table.
        assert list(first.values()) == list(second.values())
    finally:
        mariadb.execute(f"DROP DATABASE IF EXISTS `{other}`")


def test_workload_inserts_updates_deletes_and_runs_ddl(mariadb: PrivateMariaDB, shop: str) -> None:
    before = _checksums(mariadb, shop)
    orders_before = mariadb.query(f"SELECT COUNT(*), MAX(id) FROM `{shop}`.orders")[0]
    workload = Workload(
        mariadb.admin_connection,
        database=shop,
        rate=0,
        txn_size=3,
        seed=1,
        ddl=[(0.0, "ALTER TABLE orders ADD COLUMN gift_wrap BOOL NULL")],
    )
    stats = workload.run(max_ops=600)
    assert stats.total >= 600
    assert stats.transactions == stats.total // 3
    assert set(stats.ops) == {"insert", "update", "delete"}
    assert stats.ddl == ["ALTER TABLE orders ADD COLUMN gift_wrap BOOL NULL"]
    after = _checksums(mariadb, shop)
    assert all(after[t] != before[t] for t in after if not t.endswith(".products")), (before, after)
    assert mariadb.query(f"SELECT MAX(id) FROM `{shop}`.orders")[0][0] > orders_before[1]
    columns = [r[0] for r in mariadb.query(f"SHOW COLUMNS FROM `{shop}`.orders")]
    assert "gift_wrap" in columns


def test_workload_in_background_stops_on_request(mariadb: PrivateMariaDB, shop: str) -> None:
    workload = Workload(mariadb.admin_connection, database=shop, rate=200, tables=("orders",)).start()
    time.sleep(0.5)
    stats = workload.stop()
    assert stats.total > 0
    assert set(stats.ops) <= {"insert", "update", "delete"}
