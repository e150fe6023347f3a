"""The demo shop database: a realistic schema that covers every type binlake maps, and a loader.

Tables (and what each one is there to exercise):

- ``customers``: BIGINT UNSIGNED auto-increment key, utf8mb4 names with emoji, BOOL, JSON,
  DATE, DATETIME(6), TIMESTAMP(6), DECIMAL.
- ``products``: INT UNSIGNED key, latin1 CHAR, TEXT, ENUM, SET, FLOAT, DOUBLE, SMALLINT,
  TINYINT UNSIGNED, YEAR, BIT(8), BLOB, BINARY(16).
- ``orders``: signed BIGINT key (dense: even split), TIME (negative and > 24 h values),
  BIGINT UNSIGNED values up to 2^64 - 1, TIMESTAMP(6) NULL.
- ``order_items``: composite primary key (order_id, line_no), MEDIUMINT, DECIMAL(5,4).
- ``page_views``: no primary key; ``customer_id`` (nullable) is its chunk key in the demo pipeline.
- ``coupons``: VARCHAR primary key under a case-insensitive collation (codes differ in case only
  in their letters' case are the same key), DATE, TIME.
- ``gift_cards``: BIGINT UNSIGNED key with every value above 2^63 (sparse: uneven split),
  VARBINARY, TIMESTAMP(0), TINYINT signed.
- ``order_totals``: a view, which discovery must skip.

Rows come from a seeded generator (``demo_rows``), so a given (rows, seed) always loads the same data.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pymysql

from binlake.testing.demo_rows import DemoSize, row_stream

log = logging.getLogger(__name__)

DEMO_DATABASE = "shop"

SCHEMA: tuple[str, ...] = (
    """CREATE TABLE customers (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  email VARCHAR(191) NOT NULL,
  full_name VARCHAR(100) NOT NULL,
  country CHAR(2) NOT NULL,
  birth_date DATE NULL,
  is_active BOOL NOT NULL DEFAULT 1,
  loyalty_points INT NOT NULL DEFAULT 0,
  credit_limit DECIMAL(12,2) NULL,
  preferences JSON NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY uk_customers_email (email)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci""",
    """CREATE TABLE products (
  id INT UNSIGNED NOT NULL,
  sku CHAR(12) CHARACTER SET latin1 NOT NULL,
  name VARCHAR(200) NOT NULL,
  description TEXT NULL,
  category ENUM('books','electronics','garden','toys','grocery','fashion') NOT NULL,
  tags SET('new','sale','eco','gift','limited') NOT NULL DEFAULT '',
  price DECIMAL(10,2) NOT NULL,
  weight_kg FLOAT NULL,
  rating DOUBLE NULL,
  stock SMALLINT NOT NULL,
  min_age TINYINT UNSIGNED NOT NULL DEFAULT 0,
  launch_year YEAR NULL,
  flags BIT(8) NOT NULL DEFAULT b'0',
  thumbnail BLOB NULL,
  checksum BINARY(16) NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE orders (
  id BIGINT NOT NULL,
  customer_id BIGINT UNSIGNED NOT NULL,
  status ENUM('pending','paid','shipped','delivered','cancelled') NOT NULL,
  total DECIMAL(14,2) NOT NULL,
  currency CHAR(3) NOT NULL DEFAULT 'EUR',
  ordered_at DATETIME(6) NOT NULL,
  shipped_at TIMESTAMP(6) NULL DEFAULT NULL,
  delivery_window TIME NULL,
  external_ref BIGINT UNSIGNED NULL,
  note TEXT NULL,
  PRIMARY KEY (id),
  KEY idx_orders_customer (customer_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE order_items (
  order_id BIGINT NOT NULL,
  line_no SMALLINT UNSIGNED NOT NULL,
  product_id INT UNSIGNED NOT NULL,
  quantity MEDIUMINT NOT NULL,
  unit_price DECIMAL(10,2) NOT NULL,
  discount DECIMAL(5,4) NOT NULL DEFAULT 0,
  is_gift BOOLEAN NOT NULL DEFAULT 0,
  PRIMARY KEY (order_id, line_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE page_views (
  customer_id BIGINT UNSIGNED NULL,
  url VARCHAR(500) NOT NULL,
  referrer VARCHAR(500) NULL,
  viewed_at DATETIME(3) NOT NULL,
  duration_ms INT UNSIGNED NULL,
  KEY idx_page_views_customer (customer_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE coupons (
  code VARCHAR(32) NOT NULL,
  description VARCHAR(255) NULL,
  percent_off TINYINT UNSIGNED NOT NULL,
  max_uses MEDIUMINT UNSIGNED NULL,
  valid_from DATE NOT NULL,
  valid_to DATE NULL,
  daily_start TIME(3) NULL,
  PRIMARY KEY (code)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci""",
    """CREATE TABLE gift_cards (
  card_number BIGINT UNSIGNED NOT NULL,
  balance DECIMAL(10,2) NOT NULL,
  issued_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  expires DATE NULL,
  pin_hash VARBINARY(32) NOT NULL,
  reissues TINYINT NOT NULL DEFAULT 0,
  PRIMARY KEY (card_number)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE VIEW order_totals AS
  SELECT customer_id, COUNT(*) AS orders, SUM(total) AS total FROM orders GROUP BY customer_id""",
)

COLUMNS: dict[str, tuple[str, ...]] = {
    "customers": (
        "id",
        "email",
        "full_name",
        "country",
        "birth_date",
        "is_active",
        "loyalty_points",
        "credit_limit",
        "preferences",
        "created_at",
        "updated_at",
    ),
    "products": (
        "id",
        "sku",
        "name",
        "description",
        "category",
        "tags",
        "price",
        "weight_kg",
        "rating",
        "stock",
        "min_age",
        "launch_year",
        "flags",
        "thumbnail",
        "checksum",
    ),
    "orders": (
        "id",
        "customer_id",
        "status",
        "total",
        "currency",
        "ordered_at",
        "shipped_at",
        "delivery_window",
        "external_ref",
        "note",
    ),
    "order_items": ("order_id", "line_no", "product_id", "quantity", "unit_price", "discount", "is_gift"),
    "page_views": ("customer_id", "url", "referrer", "viewed_at", "duration_ms"),
    "coupons": ("code", "description", "percent_off", "max_uses", "valid_from", "valid_to", "daily_start"),
    "gift_cards": ("card_number", "balance", "issued_at", "expires", "pin_hash", "reissues"),
}


def insert_sql(table: str, columns: Sequence[str] | None = None) -> str:
    """``INSERT INTO `table` (cols…) VALUES (%s, …)`` for the demo table."""
    cols = columns or COLUMNS[table]
    names = ", ".join(f"`{c}`" for c in cols)
    # Plain %s only: pymysql turns executemany into one multi-row INSERT just for that shape.
    return f"INSERT INTO `{table}` ({names}) VALUES ({', '.join(['%s'] * len(cols))})"


def create_schema(conn: pymysql.Connection[Any], database: str = DEMO_DATABASE) -> None:
    """Create ``database`` (dropping an old one) with the demo tables and view."""
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
        cur.execute(f"USE `{database}`")
        for statement in SCHEMA:
            cur.execute(statement)


def load(
    connect: Callable[[], pymysql.Connection[Any]],
    rows: int,
    database: str = DEMO_DATABASE,
    seed: int = 42,
    batch: int = 2000,
    progress: Callable[[str, int, float], None] | None = None,
) -> DemoSize:
    """Create the demo schema in ``database`` and load about ``rows`` rows into it.

    Args:
        connect: opens a connection with rights to create databases and insert.
        rows: total rows over all tables (1M loads in about a minute on 2 cores).
        seed: the generator's seed; the same (rows, seed) loads the same data.
        batch: rows per multi-row INSERT.
        progress: called per table with (table, rows, seconds).

    Returns:
        The row count of each table.
    """
    size = DemoSize.for_rows(rows)
    with contextlib.closing(connect()) as conn:
        create_schema(conn, database)
        conn.autocommit(False)
        with conn.cursor() as cur:
            cur.execute(f"USE `{database}`")
            cur.execute("SET SESSION unique_checks = 0, foreign_key_checks = 0")
            for table, generator in row_stream(size, seed):
                started = time.monotonic()
                count = _insert_batches(cur, table, generator, batch)
                conn.commit()
                if progress:
                    progress(table, count, time.monotonic() - started)
    return size


def _insert_batches(cur: Any, table: str, rows: Iterator[tuple[Any, ...]], batch: int) -> int:
    sql = insert_sql(table)
    count = 0
    chunk: list[tuple[Any, ...]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= batch:
            cur.executemany(sql, chunk)
            count += len(chunk)
            chunk.clear()
    if chunk:
        cur.executemany(sql, chunk)
        count += len(chunk)
    return count
