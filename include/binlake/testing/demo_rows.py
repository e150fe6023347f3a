"""The demo shop's rows: a seeded generator per table (values valid in MySQL's strict mode), so
a given (rows, seed) always loads the same data; ``DemoSize`` splits a row count over the tables.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

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


def row_stream(size: DemoSize, seed: int) -> Iterator[tuple[str, Iterator[tuple[Any, ...]]]]:
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
