"""Foreign keys whose actions change rows the binlog never shows: found in the server's DDL and in
the DDL a stream meets."""

from __future__ import annotations

import pytest

from binlake.events import TableId
from binlake.source.server.foreign_keys import adds_cascading_key, ddl_target, declared_keys

T = TableId("shop", "items")


def test_keys_as_show_create_table_writes_them() -> None:
    statement = (
        "CREATE TABLE `items` (`id` int NOT NULL, `order_id` int, `sku` int, `note` varchar(20) DEFAULT "
        "'ON DELETE CASCADE', PRIMARY KEY (`id`), KEY `o` (`order_id`), "
        "CONSTRAINT `fk_order` FOREIGN KEY (`order_id`) REFERENCES `orders` (`id`) ON DELETE CASCADE, "
        "CONSTRAINT `fk_sku` FOREIGN KEY (`sku`) REFERENCES `cat`.`skus` (`id`) ON UPDATE SET NULL, "
        "CONSTRAINT `fk_plain` FOREIGN KEY (`sku`) REFERENCES `cat`.`skus` (`id`) ON DELETE NO ACTION"
        ") ENGINE=InnoDB"
    )
    keys = {k.name: (k.parent, k.on_delete, k.on_update) for k in declared_keys(T, statement)}
    assert keys == {
        "fk_order": (TableId("shop", "orders"), "CASCADE", "RESTRICT"),
        "fk_sku": (TableId("cat", "skus"), "RESTRICT", "SET NULL"),
        "fk_plain": (TableId("cat", "skus"), "NO ACTION", "RESTRICT"),
    }


@pytest.mark.parametrize(
    ("statement", "cascades"),
    [
        ("ALTER TABLE items ADD CONSTRAINT f FOREIGN KEY (o) REFERENCES orders (id) ON DELETE CASCADE", True),
        ("ALTER TABLE items ADD FOREIGN KEY (o) REFERENCES orders (id) ON UPDATE SET DEFAULT", True),
        ("CREATE TABLE t (id INT, p INT, FOREIGN KEY (p) REFERENCES p (id) on delete set null)", True),
        ("ALTER TABLE items ADD FOREIGN KEY (o) REFERENCES orders (id) ON DELETE RESTRICT", False),
        ("ALTER TABLE items ADD COLUMN note VARCHAR(40) DEFAULT 'REFERENCES x ON DELETE CASCADE'", False),
        ("ALTER TABLE items /* ON DELETE CASCADE */ ADD COLUMN x INT", False),
    ],
)
def test_ddl_that_declares_a_cascading_key(statement: str, cascades: bool) -> None:
    assert adds_cascading_key(statement) is cascades


@pytest.mark.parametrize(
    ("statement", "target"),
    [
        ("ALTER TABLE items ADD c INT", TableId("shop", "items")),
        ("alter online table `cat`.`skus` add c int", TableId("cat", "skus")),
        ("CREATE TABLE IF NOT EXISTS x (id INT)", TableId("shop", "x")),
        ("CREATE OR REPLACE TABLE y (id INT)", TableId("shop", "y")),
        ("CREATE TEMPORARY TABLE z (id INT)", None),
        ("CREATE INDEX i ON items (c)", None),
    ],
)
def test_the_table_a_ddl_statement_defines(statement: str, target: TableId | None) -> None:
    assert ddl_target(statement, "shop") == target
