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

Rows come from a seeded generator, so a given (rows, seed) always loads the same data.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pymysql

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

#: Share of the requested row count that each table gets.
SHARES: dict[str, float] = {
    "customers": 0.10,
    "products": 0.01,
    "orders": 0.30,
    "order_items": 0.40,
    "page_views": 0.15,
    "coupons": 0.02,
    "gift_cards": 0.02,
}

U64_MAX = 2**64 - 1
_EPOCH = dt.datetime(2024, 1, 1)
_NAMES = [
    "Ana",
    "Bjørn",
    "Chloé",
    "Dmitri",
    "Eun-ji",
    "Fatima",
    "György",
    "Hiro",
    "Inés",
    "Jürgen",
    "Kwame",
    "Łukasz",
    "Mei 美",
    "Noor",
    "Olúwa",
    "Priya",
    "Quinn",
    "Raúl",
    "Søren",
    "Zoë",
]
_SURNAMES = [
    "Silva",
    "Müller",
    "Nguyễn",
    "O'Brien",
    "Kowalski",
    "Tanaka 田中",
    "Smith",
    "García",
    "Ivanov",
    "Dubois",
    "Rossi",
    "Ahmed",
    "Kim",
    "Johansson",
    "Costa",
]
_EMOJI = ["🎉", "🚀", "🌿", "🍕", "❤️", "👩‍💻", "🐙", "☕", ""]
_COUNTRIES = ["DE", "FR", "US", "BR", "JP", "IN", "NG", "PL", "SE", "ES"]
_CATEGORIES = ["books", "electronics", "garden", "toys", "grocery", "fashion"]
_TAGS = ["new", "sale", "eco", "gift", "limited"]
_STATUSES = ["pending", "paid", "shipped", "delivered", "cancelled"]
_URLS = ["/", "/search", "/cart", "/checkout", "/p/{}", "/c/{}", "/account", "/help/ünïcødé"]


@dataclass(frozen=True)
class DemoSize:
    """Row counts per table for a requested total."""

    customers: int
    products: int
    orders: int
    order_items: int
    page_views: int
    coupons: int
    gift_cards: int

    @classmethod
    def for_rows(cls, rows: int) -> DemoSize:
        counts = {name: max(10, int(rows * share)) for name, share in SHARES.items()}
        return cls(**counts)

    @property
    def total(self) -> int:
        return sum(self.__dict__.values())


class _Rows:
    """Seeded row generators, one per table; values stay valid in MySQL's strict mode."""

    def __init__(self, size: DemoSize, seed: int) -> None:
        self.size = size
        self.rng = random.Random(seed)

    def customer(self, i: int) -> tuple[Any, ...]:
        r = self.rng
        name = f"{r.choice(_NAMES)} {r.choice(_SURNAMES)} {r.choice(_EMOJI)}".strip()
        prefs = {
            "newsletter": r.random() < 0.5,
            "lang": r.choice(["en", "de", "pt", "ja"]),
            "sizes": r.sample(["S", "M", "L", "XL"], k=r.randint(0, 3)),
        }
        created = _EPOCH + dt.timedelta(seconds=r.randint(0, 60_000_000), microseconds=r.randint(0, 999_999))
        return (
            i,
            f"customer{i}@example.com",
            name,
            r.choice(_COUNTRIES),
            None if r.random() < 0.1 else dt.date(1940, 1, 1) + dt.timedelta(days=r.randint(0, 25_000)),
            r.random() < 0.9,
            r.randint(-500, 100_000),
            None if r.random() < 0.3 else Decimal(r.randint(0, 9_999_999_999)) / 100,
            None if r.random() < 0.2 else json.dumps(prefs, ensure_ascii=False),
            created,
            created + dt.timedelta(days=r.randint(0, 300)),
        )

    def product(self, i: int) -> tuple[Any, ...]:
        r = self.rng
        tags = ",".join(t for t in _TAGS if r.random() < 0.25)
        return (
            i,
            f"SKU{i:09d}",
            f"Product {i} {r.choice(_EMOJI)}".strip(),
            None if r.random() < 0.2 else "Lorem ipsum dolor sit amet. " * r.randint(1, 6),
            r.choice(_CATEGORIES),
            tags,
            Decimal(r.randint(1, 99_999_999)) / 100,
            None if r.random() < 0.1 else round(r.uniform(0.01, 80.0), 3),
            None if r.random() < 0.1 else r.uniform(0.0, 5.0),
            r.randint(-100, 32_767),
            r.randint(0, 255),
            None if r.random() < 0.2 else r.randint(1990, 2030),
            r.randint(0, 255),
            None if r.random() < 0.5 else r.randbytes(r.randint(0, 64)),
            hashlib.md5(str(i).encode()).digest(),
        )

    def order(self, i: int) -> tuple[Any, ...]:
        r = self.rng
        ordered = _EPOCH + dt.timedelta(seconds=r.randint(0, 60_000_000), microseconds=r.randint(0, 999_999))
        status = r.choice(_STATUSES)
        shipped = (
            ordered + dt.timedelta(hours=r.randint(1, 200)) if status in ("shipped", "delivered") else None
        )
        # TIME spans -838:59:59 .. 838:59:59: keep some negative and > 24 h values.
        window = dt.timedelta(seconds=r.randint(-3_000_000, 3_000_000)) if r.random() < 0.5 else None
        ref = r.choice([None, r.randint(0, 2**32), U64_MAX - r.randint(0, 1000)])
        return (
            i,
            r.randint(1, self.size.customers),
            status,
            Decimal(r.randint(0, 10**12)) / 100,
            r.choice(["EUR", "USD", "BRL", "JPY"]),
            ordered,
            shipped,
            window,
            ref,
            None if r.random() < 0.7 else f"Leave at door 🚪 #{i}",
        )

    def order_item(self, order_id: int, line_no: int) -> tuple[Any, ...]:
        r = self.rng
        return (
            order_id,
            line_no,
            r.randint(1, self.size.products),
            r.randint(1, 50),
            Decimal(r.randint(1, 9_999_999)) / 100,
            Decimal(r.randint(0, 5000)) / 10_000,
            r.random() < 0.05,
        )

    def page_view(self, _i: int) -> tuple[Any, ...]:
        r = self.rng
        url = r.choice(_URLS).format(r.randint(1, 10_000))
        viewed = _EPOCH + dt.timedelta(
            seconds=r.randint(0, 60_000_000), microseconds=r.randint(0, 999) * 1000
        )
        return (
            None if r.random() < 0.15 else r.randint(1, self.size.customers),
            url,
            None if r.random() < 0.5 else "https://search.example/?q=" + r.choice(_NAMES),
            viewed,
            None if r.random() < 0.1 else r.randint(0, 600_000),
        )

    def coupon(self, i: int) -> tuple[Any, ...]:
        r = self.rng
        start = dt.date(2023, 1, 1) + dt.timedelta(days=r.randint(0, 900))
        # Case varies, but the number makes each code unique under the case-insensitive collation.
        code = "".join(c.upper() if r.random() < 0.5 else c for c in f"save{i:06d}x")
        return (
            code,
            None if r.random() < 0.3 else f"{r.randint(5, 50)}% off 🎁",
            r.randint(1, 100),
            None if r.random() < 0.5 else r.randint(1, 16_777_215),
            start,
            None if r.random() < 0.3 else start + dt.timedelta(days=r.randint(1, 365)),
            None
            if r.random() < 0.5
            else dt.timedelta(seconds=r.randint(0, 86_399), milliseconds=r.randint(0, 999)),
        )

    def gift_card(self, i: int) -> tuple[Any, ...]:
        r = self.rng
        # Spread over [2^63, 2^64): every key is above the signed BIGINT range.
        span = (U64_MAX - 2**63) // (self.size.gift_cards + 1)
        number = 2**63 + i * span + r.randint(0, span - 1)
        issued = dt.datetime(2020, 1, 1) + dt.timedelta(seconds=r.randint(0, 150_000_000))
        return (
            number,
            Decimal(r.randint(0, 100_000)) / 100,
            issued,
            None if r.random() < 0.3 else issued.date() + dt.timedelta(days=730),
            hashlib.sha256(str(number).encode()).digest(),
            r.randint(-128, 127),
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


def _row_stream(size: DemoSize, seed: int) -> Iterator[tuple[str, Iterator[tuple[Any, ...]]]]:
    rows = _Rows(size, seed)
    yield "customers", (rows.customer(i) for i in range(1, size.customers + 1))
    yield "products", (rows.product(i) for i in range(1, size.products + 1))
    yield "orders", (rows.order(i) for i in range(1, size.orders + 1))

    def items() -> Iterator[tuple[Any, ...]]:
        made = 0
        for order_id in range(1, size.orders + 1):
            for line in range(1, rows.rng.choice((1, 1, 1, 2, 2, 3)) + 1):
                if made == size.order_items:
                    return
                yield rows.order_item(order_id, line)
                made += 1

    yield "order_items", items()
    yield "page_views", (rows.page_view(i) for i in range(size.page_views))
    yield "coupons", (rows.coupon(i) for i in range(size.coupons))
    yield "gift_cards", (rows.gift_card(i) for i in range(size.gift_cards))


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
            for table, generator in _row_stream(size, seed):
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
