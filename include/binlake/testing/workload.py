"""A write workload on the demo database: inserts, updates and deletes at a set rate, plus DDL.

Used by tests (writes during the snapshot and the stream), the demo and the benchmarks. Each
operation is one statement; ``txn_size`` groups several into one transaction, so the binlog also
holds multi-statement transactions. The generator is seeded: the same seed issues the same
statements against the same starting data.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pymysql

from binlake.testing.demo import DEMO_DATABASE, insert_sql
from binlake.testing.demo_rows import U64_MAX

log = logging.getLogger(__name__)

Connect = Callable[[], "pymysql.Connection[Any]"]


@dataclass
class WorkloadStats:
    """What a workload run did."""

    ops: Counter[str] = field(default_factory=Counter)
    transactions: int = 0
    ddl: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "ops": dict(self.ops),
            "total": self.total,
            "transactions": self.transactions,
            "ddl": len(self.ddl),
            "seconds": round(self.seconds, 3),
            "ops_per_s": round(self.total / self.seconds, 1) if self.seconds else 0.0,
        }


@dataclass
class Workload:
    """Random DML on the demo tables at ``rate`` statements per second.

    Args:
        connect: opens a connection with INSERT/UPDATE/DELETE (and ALTER for DDL) rights.
        database: the demo database to write to.
        rate: statements per second (0: as fast as possible).
        txn_size: statements per transaction.
        seed: seeds the choice of operations, keys and values.
        tables: restrict the workload to these demo tables.
        ddl: (seconds after start, statement) pairs run in order between transactions.
    """

    connect: Connect
    database: str = DEMO_DATABASE
    rate: float = 100.0
    txn_size: int = 1
    seed: int = 7
    tables: Sequence[str] = (
        "customers",
        "products",
        "orders",
        "order_items",
        "page_views",
        "coupons",
        "gift_cards",
    )
    ddl: Sequence[tuple[float, str]] = ()
    stats: WorkloadStats = field(default_factory=WorkloadStats, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _error: BaseException | None = field(default=None, init=False, repr=False)

    def run(self, seconds: float | None = None, max_ops: int | None = None) -> WorkloadStats:
        """Run in this thread until ``seconds`` pass, ``max_ops`` statements ran, or :meth:`stop`."""
        rng = random.Random(self.seed)
        pending_ddl = sorted(self.ddl)
        started = time.monotonic()
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            conn.autocommit(False)
            cur.execute(f"USE `{self.database}`")
            keys = _Keys.read(cur)
            ops = self._operations()
            while not self._stop.is_set():
                elapsed = time.monotonic() - started
                if (seconds is not None and elapsed >= seconds) or (
                    max_ops is not None and self.stats.total >= max_ops
                ):
                    break
                while pending_ddl and pending_ddl[0][0] <= elapsed:
                    statement = pending_ddl.pop(0)[1]
                    cur.execute(statement)  # DDL commits implicitly
                    self.stats.ddl.append(statement)
                done = []
                try:
                    for _ in range(self.txn_size):
                        name, op = rng.choice(ops)
                        op(cur, rng, keys)
                        done.append(name)
                    conn.commit()
                except pymysql.err.OperationalError as e:
                    if e.args[0] not in _RETRIED:
                        raise
                    conn.rollback()  # the server chose this transaction as a deadlock's victim: as
                    continue  # an application would, it goes on with the next one
                self.stats.ops.update(done)
                self.stats.transactions += 1
                if self.rate > 0:
                    # Pace against the start time, not per statement, so slow statements catch up.
                    ahead = self.stats.total / self.rate - (time.monotonic() - started)
                    if ahead > 0:
                        self._stop.wait(ahead)
        self.stats.seconds = time.monotonic() - started
        return self.stats

    def start(self, seconds: float | None = None) -> Workload:
        """Run in a background thread; :meth:`stop` ends it and re-raises its error, if any."""

        def target() -> None:
            try:
                self.run(seconds)
            except BaseException as e:  # re-raised in stop()
                self._error = e

        self._thread = threading.Thread(target=target, name="binlake-workload", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> WorkloadStats:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return self.stats

    def _operations(self) -> list[tuple[str, Callable[[Any, random.Random, _Keys], None]]]:
        # Weights by repetition: inserts 40%, updates 45%, deletes 15% (per table that is enabled).
        catalog: dict[str, list[tuple[str, Callable[[Any, random.Random, _Keys], None]]]] = {
            "customers": [("insert", _insert_customer), ("update", _update_customer)],
            "products": [("update", _update_product)],
            "orders": [
                ("insert", _insert_order),
                ("insert", _insert_order),
                ("update", _update_order),
                ("update", _update_order),
                ("delete", _delete_order),
            ],
            "order_items": [("update", _update_item), ("delete", _delete_item)],
            "page_views": [("insert", _insert_view), ("delete", _delete_view)],
            "coupons": [("insert", _insert_coupon), ("update", _update_coupon), ("delete", _delete_coupon)],
            "gift_cards": [("update", _update_gift_card), ("insert", _insert_gift_card)],
        }
        ops = [op for table in self.tables for op in catalog[table]]
        if not ops:
            raise ValueError(f"no workload operations for tables {list(self.tables)}")
        return ops


#: Errors after which the server has rolled the transaction back (a deadlock, a lock wait timeout).
_RETRIED = (1213, 1205)


@dataclass
class _Keys:
    """Key ranges the workload picks from; a picked key may be gone (a no-op statement)."""

    max_customer: int
    max_product: int
    max_order: int
    next_coupon: int

    @classmethod
    def read(cls, cur: Any) -> _Keys:
        def one(sql: str) -> int:
            cur.execute(sql)
            return int(cur.fetchone()[0] or 0)

        return cls(
            max_customer=one("SELECT MAX(id) FROM customers"),
            max_product=one("SELECT MAX(id) FROM products"),
            max_order=one("SELECT MAX(id) FROM orders"),
            # Past the highest code any run made (not the count: deletes would make it collide).
            next_coupon=max(
                1_000_001,  # deletes pick among 1_000_001 … next_coupon
                one("SELECT MAX(CAST(SUBSTRING(code, 3, 8) AS UNSIGNED)) FROM coupons WHERE code LIKE 'wl%'"),
            ),
        )


def _now(rng: random.Random) -> dt.datetime:
    return dt.datetime.now().replace(microsecond=rng.randint(0, 999_999))


def _insert_customer(cur: Any, rng: random.Random, keys: _Keys) -> None:
    keys.max_customer += 1
    i = keys.max_customer
    cur.execute(
        insert_sql(
            "customers",
            (
                "id",
                "email",
                "full_name",
                "country",
                "is_active",
                "loyalty_points",
                "preferences",
                "created_at",
            ),
        ),
        (
            i,
            f"new{i}.{rng.randint(0, 10**9)}@example.com",
            f"New customer {i} ✨",
            "PT",
            True,
            0,
            json.dumps({"source": "workload"}),
            _now(rng),
        ),
    )


def _update_customer(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        "UPDATE customers SET loyalty_points = loyalty_points + %s, is_active = %s WHERE id = %s",
        (rng.randint(1, 100), rng.random() < 0.9, rng.randint(1, max(1, keys.max_customer))),
    )


def _update_product(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        "UPDATE products SET price = %s, stock = %s, tags = %s WHERE id = %s",
        (
            Decimal(rng.randint(1, 9_999_999)) / 100,
            rng.randint(0, 32_000),
            rng.choice(["", "sale", "new,eco"]),
            rng.randint(1, max(1, keys.max_product)),
        ),
    )


def _insert_order(cur: Any, rng: random.Random, keys: _Keys) -> None:
    keys.max_order += 1
    i = keys.max_order
    cur.execute(
        insert_sql(
            "orders",
            ("id", "customer_id", "status", "total", "ordered_at", "delivery_window", "external_ref"),
        ),
        (
            i,
            rng.randint(1, max(1, keys.max_customer)),
            "pending",
            Decimal(rng.randint(0, 10**8)) / 100,
            _now(rng),
            dt.timedelta(hours=rng.randint(-30, 30)),
            U64_MAX - rng.randint(0, 10),
        ),
    )
    for line in range(1, rng.randint(1, 3) + 1):
        cur.execute(
            insert_sql("order_items", ("order_id", "line_no", "product_id", "quantity", "unit_price")),
            (
                i,
                line,
                rng.randint(1, max(1, keys.max_product)),
                rng.randint(1, 5),
                Decimal(rng.randint(100, 99_999)) / 100,
            ),
        )


def _update_order(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        "UPDATE orders SET status = %s, shipped_at = IF(%s IN ('shipped', 'delivered'), NOW(6), shipped_at) "
        "WHERE id = %s",
        (
            status := rng.choice(["paid", "shipped", "delivered", "cancelled"]),
            status,
            rng.randint(1, max(1, keys.max_order)),
        ),
    )


def _delete_order(cur: Any, rng: random.Random, keys: _Keys) -> None:
    order_id = rng.randint(1, max(1, keys.max_order))
    cur.execute("DELETE FROM order_items WHERE order_id = %s", (order_id,))
    cur.execute("DELETE FROM orders WHERE id = %s", (order_id,))


def _update_item(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        "UPDATE order_items SET quantity = %s, discount = %s WHERE order_id = %s AND line_no = 1",
        (rng.randint(1, 9), Decimal(rng.randint(0, 3000)) / 10_000, rng.randint(1, max(1, keys.max_order))),
    )


def _delete_item(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        "DELETE FROM order_items WHERE order_id = %s AND line_no > 1",
        (rng.randint(1, max(1, keys.max_order)),),
    )


def _insert_view(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        insert_sql("page_views", ("customer_id", "url", "viewed_at", "duration_ms")),
        (
            None if rng.random() < 0.2 else rng.randint(1, max(1, keys.max_customer)),
            "/p/workload",
            _now(rng).replace(microsecond=0),
            rng.randint(0, 60_000),
        ),
    )


def _delete_view(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        "DELETE FROM page_views WHERE customer_id = %s LIMIT 1", (rng.randint(1, max(1, keys.max_customer)),)
    )


def _coupon_code(n: int, rng: random.Random) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c for c in f"wl{n:08d}z")


def _insert_coupon(cur: Any, rng: random.Random, keys: _Keys) -> None:
    keys.next_coupon += 1
    cur.execute(
        insert_sql("coupons", ("code", "percent_off", "valid_from")),
        (_coupon_code(keys.next_coupon, rng), rng.randint(1, 90), dt.date.today()),
    )


def _update_coupon(cur: Any, rng: random.Random, keys: _Keys) -> None:
    # Matched case-insensitively: the upper-case code finds the mixed-case row.
    cur.execute(
        "UPDATE coupons SET percent_off = %s WHERE code = %s",
        (rng.randint(1, 90), f"SAVE{rng.randint(0, 20_000):06d}X"),
    )


def _delete_coupon(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        "DELETE FROM coupons WHERE code = %s", (_coupon_code(rng.randint(1_000_001, keys.next_coupon), rng),)
    )


def _update_gift_card(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        "UPDATE gift_cards SET balance = %s, reissues = reissues + 1 "
        "WHERE card_number >= %s AND reissues < 100 ORDER BY card_number LIMIT 1",
        (Decimal(rng.randint(0, 100_000)) / 100, rng.randint(2**63, U64_MAX)),
    )


def _insert_gift_card(cur: Any, rng: random.Random, keys: _Keys) -> None:
    cur.execute(
        "INSERT IGNORE INTO gift_cards (card_number, balance, pin_hash) VALUES (%s, %s, %s)",
        (rng.randint(2**63, U64_MAX), Decimal(rng.randint(0, 50_000)) / 100, rng.randbytes(32)),
    )
