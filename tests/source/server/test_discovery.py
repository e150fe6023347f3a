"""Discovery: the captured tables' schemas as CreateTable events, from information_schema."""

from __future__ import annotations

import contextlib
import subprocess
import sys

from binlake.events import TableId
from binlake.source.server.connection import connect
from binlake.source.server.discovery import TableSelector, discover, list_tables, parse_enum_values
from binlake.source.server.foreign_keys import cascading_keys
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import source_config


def test_parse_enum_values() -> None:
    assert parse_enum_values("enum('a','b c','it''s','x,y')") == ("a", "b c", "it's", "x,y")
    assert parse_enum_values("set('new','sale')") == ("new", "sale")
    assert parse_enum_values("enum('','a')") == ("", "a")
    assert parse_enum_values(r"enum('a\nb','c\\d')") == ("a\nb", "c\\d")


def test_members_without_escapes_are_read_as_the_tokenizer_reads_them() -> None:
    """The plain reading (no tokenizer) of member lists holding no escape: what the tokenizer says."""
    from binlake.source.ddl.tokens import tokens

    plain = ["enum('a','b c','x,y')", "set('(p)',' q ','r;s','é','\"')", "enum('a','b')", "enum(' ')"]
    for text in plain:
        assert parse_enum_values(text) == tuple(t.text for t in tokens(text) if t.kind == "string")


def test_enum_members_are_discovered_as_the_server_holds_them(mariadb: PrivateMariaDB, database: str) -> None:
    """Members with a quote, a backslash, a newline, a tab: what information_schema escapes, undone
    the server's way (a scanner of binlake's own once read the newline as the letter n — every such
    value would then have been written wrong to the sink)."""
    mariadb.execute(
        "CREATE TABLE e (id INT PRIMARY KEY, "
        r"m ENUM('a''b', 'c\\d', 'x\ny', 'tab\there', 'q\"q'), s SET('p;q' , 'r\ns'))",
        database=database,
    )
    mariadb.execute(
        "INSERT INTO e VALUES (1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 4, 1), (5, 5, 2)", database=database
    )
    with contextlib.closing(connect(source_config(mariadb, database))) as conn:
        (schema,) = discover(conn, [TableId(database, "e")])
    with contextlib.closing(mariadb.admin_connection(database)) as admin, admin.cursor() as cur:
        cur.execute("SELECT m, s FROM e ORDER BY id")
        stored = cur.fetchall()
    assert schema.column("m").values == tuple(m for m, _ in stored)
    assert schema.column("m").values[2] == "x\ny"
    assert schema.column("s").values == (stored[0][1], stored[1][1]) == ("p;q", "r\ns")


def test_demo_schema_is_discovered_with_full_types(mariadb: PrivateMariaDB, database: str) -> None:
    demo.create_schema(mariadb.admin_connection(), database)
    source = source_config(mariadb, database)
    with contextlib.closing(connect(source)) as conn:
        tables = TableSelector(source.tables).select(list_tables(conn))
        schemas = {s.table.table: s for s in discover(conn, tables)}
    assert set(schemas) == set(demo.COLUMNS)  # the view is not there
    for name, columns in demo.COLUMNS.items():
        assert schemas[name].column_names == columns
    products = schemas["products"]
    assert products.primary_key == ("id",)
    assert products.column("id").unsigned
    assert products.column("price").precision == 10
    assert products.column("price").scale == 2
    assert products.column("category").values == (
        "books",
        "electronics",
        "garden",
        "toys",
        "grocery",
        "fashion",
    )
    assert products.column("tags").data_type == "set"
    assert products.column("sku").charset == "latin1"
    assert products.column("flags").column_type == "bit(8)"
    assert products.column("description").nullable
    assert not products.column("name").nullable
    customers = schemas["customers"]
    assert customers.column("preferences").data_type == "json"  # LONGTEXT + json_valid on MariaDB
    assert customers.column("id").auto_increment
    assert customers.column("created_at").fsp == 6
    assert customers.column("is_active").column_type == "tinyint(1)"
    assert customers.column("is_active").default == "1"
    assert schemas["order_items"].primary_key == ("order_id", "line_no")
    assert schemas["page_views"].primary_key == ()
    assert schemas["coupons"].column("code").collation == "utf8mb4_general_ci"


def test_missing_tables_are_left_out(mariadb: PrivateMariaDB, database: str) -> None:
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=database)
    with contextlib.closing(connect(source_config(mariadb, database))) as conn:
        found = discover(conn, [TableId(database, "t"), TableId(database, "gone")])
    assert [s.table.table for s in found] == ["t"]


def test_discovering_a_table_reads_that_tables_metadata_not_its_databases(
    mariadb: PrivateMariaDB, database: str
) -> None:
    """A snapshot task checks its table's schema after reading it, and the stream asks one table's
    foreign keys at a gap: what the server sends must follow the tables asked, not every table of
    their database (at 200 tables, a one-table discovery read ~1,000 rows and took 70 ms)."""
    mariadb.execute(
        "CREATE TABLE p (id INT PRIMARY KEY)",
        *[
            f"CREATE TABLE t{i} (id INT PRIMARY KEY, a INT, b TEXT, CHECK (a > 0), "
            "FOREIGN KEY (a) REFERENCES p (id))"
            for i in range(40)
        ],
        database=database,
    )
    one = [TableId(database, "t7")]
    with contextlib.closing(connect(source_config(mariadb, database))) as conn:

        def rows_sent() -> int:
            with conn.cursor() as cur:
                cur.execute("SHOW SESSION STATUS LIKE 'Rows_sent'")
                return int(cur.fetchone()[1])

        own = -rows_sent() + rows_sent()  # what a status query counts of itself
        before = rows_sent()
        (found,) = discover(conn, one)
        discovered = rows_sent() - before - own
        before = rows_sent()
        assert cascading_keys(conn, one) == []
        asked_keys = rows_sent() - before - own
    assert found.column_names == ("id", "a", "b")
    # its 3 columns, 1 primary-key column and its collation: 5 rows (41 tables: 200 and more)
    assert discovered <= 5, discovered
    assert asked_keys <= 1, asked_keys  # t7 has a foreign key (not cascading); the other 39 too


def test_tables_and_databases_named_alike_but_for_case_are_each_discovered(
    mariadb: PrivateMariaDB, database: str
) -> None:
    """Names are case-sensitive on Linux servers, and given ``IN ('T', 't')`` MariaDB's
    information_schema lookup returns one of the two tables: each is discovered, with its own
    columns (the databases too: an upper-case twin of the test's database)."""
    twin = database.upper()
    mariadb.execute(f"CREATE DATABASE `{twin}`")
    try:
        mariadb.execute(
            "CREATE TABLE t (lower_t INT PRIMARY KEY)",
            "CREATE TABLE T (upper_t INT PRIMARY KEY)",
            database=database,
        )
        mariadb.execute("CREATE TABLE t (twin_t INT PRIMARY KEY)", database=twin)
        wanted = [TableId(database, "t"), TableId(database, "T"), TableId(twin, "t")]
        with contextlib.closing(connect(source_config(mariadb, database))) as conn:
            found = {s.table: s.column_names for s in discover(conn, wanted)}
            keys = cascading_keys(conn, wanted)
        assert found == {wanted[0]: ("lower_t",), wanted[1]: ("upper_t",), wanted[2]: ("twin_t",)}
        assert keys == []
    finally:
        mariadb.execute(f"DROP DATABASE `{twin}`")


def test_the_shadow_tables_of_schema_change_tools_are_captured_with_their_table() -> None:
    from binlake.events import TableId
    from binlake.source.server.discovery import TableSelector

    selector = TableSelector([r"shop\.orders"])
    for shadow in ("_orders_gho", "_orders_del", "_orders_new", "_orders_old", "__orders_new"):
        assert selector.matches(TableId("shop", shadow))
        assert selector.shadow_of(TableId("shop", shadow)) == TableId("shop", "orders")
    for other in ("_orders_ghx", "_items_gho", "orders_gho"):
        assert not selector.matches(TableId("shop", other))
    assert selector.shadow_of(TableId("shop", "orders")) is None


def test_members_without_escapes_are_read_without_the_sql_tokenizer() -> None:
    """A snapshot task discovers its table again at its end: an ENUM without escapes must not cost
    that worker sqlglot's import (0.13 s of a cold snapshot's first tasks)."""
    code = (
        "import sys\n"
        "from binlake.source.server.discovery import parse_enum_values\n"
        "assert parse_enum_values(\"enum('new','paid')\") == ('new', 'paid')\n"
        "print('sqlglot' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
