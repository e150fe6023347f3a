"""Which sink table each source table goes to (``schema.routes``), without Spark or a server."""

from __future__ import annotations

from binlake.events import TableId
from binlake.schema.routes import Routes, SinkTable

SHARDS = (r"shop_[0-9]+\.orders_[0-9]+", "ods.orders")


def test_the_first_matching_rule_decides_and_the_rest_keep_their_names() -> None:
    routes = Routes((SHARDS, (r"shop_1\..*", "ods.everything")), None)
    assert routes.sink(TableId("shop_1", "orders_7")) == SinkTable("ods", "orders", routed=True)
    assert routes.sink(TableId("shop_1", "users")) == SinkTable("ods", "everything", routed=True)
    assert routes.sink(TableId("shop_2", "users")) == SinkTable("shop_2", "users", routed=False)


def test_a_rule_matches_the_whole_name() -> None:
    """``shop_1.orders_7_archive`` is not a shard: the regex must match all of ``db.table``."""
    routes = Routes((SHARDS,), None)
    assert not routes.sink(TableId("shop_1", "orders_7_archive")).routed
    assert not routes.sink(TableId("xshop_1", "orders_7")).routed


def test_unrouted_tables_go_to_the_configured_namespace() -> None:
    sink = Routes((SHARDS,), "lake").sink(TableId("shop_2", "users"))
    assert sink.identifier == "lake.users"
