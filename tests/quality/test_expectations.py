"""The suite of a sink table: binlake's key expectations, the YAML's, the columns they read."""

from __future__ import annotations

import pytest

from binlake.errors import ConfigError
from binlake.offsets import BinlogOffset
from binlake.quality.checkpoint import sink_offset
from binlake.quality.expectations import Expectation, configured, key_expectations, needed_columns


def test_key_expectations_cover_single_and_compound_keys() -> None:
    assert [e.type for e in key_expectations(["id"])] == [
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_unique",
    ]
    compound = key_expectations(["_source_table", "id"])
    assert [e.type for e in compound][-1] == "expect_compound_columns_to_be_unique"
    assert compound[-1].kwargs == {"column_list": ["_source_table", "id"]}
    assert key_expectations([]) == []


def test_configured_expectations_are_read_and_bad_entries_named() -> None:
    found = configured(
        "shop.orders",
        [
            {
                "expectation_type": "expect_column_values_to_be_in_set",
                "kwargs": {"column": "s", "value_set": [1]},
            }
        ],
    )
    assert found == [Expectation("expect_column_values_to_be_in_set", {"column": "s", "value_set": [1]})]
    with pytest.raises(ConfigError, match=r"quality\.tables\.shop\.orders\[1\].*found keys \['kwarg'\]"):
        configured("shop.orders", [{"kwarg": {}}])


def test_only_the_columns_expectations_read_are_loaded() -> None:
    columns = ["id", "a", "b", "c"]
    suite = [
        Expectation("expect_table_row_count_to_be_between", {"min_value": 1, "max_value": 2}),
        Expectation("expect_column_values_to_not_be_null", {"column": "b"}),
        Expectation("expect_compound_columns_to_be_unique", {"column_list": ["a", "id"]}),
    ]
    assert needed_columns(suite, columns) == ["id", "a", "b"]
    assert needed_columns([*suite, Expectation("expect_table_columns_to_match_set", {})], columns) == columns


def testsink_offset_is_the_later_of_stream_and_table_else_the_switch() -> None:
    a, b, c = BinlogOffset("b.000001", 400), BinlogOffset("b.000002", 4), BinlogOffset("b.000001", 100)
    assert sink_offset(a, b, c) == b
    assert sink_offset(b, a, c) == b
    assert sink_offset(None, None, c) == c
    assert sink_offset(None, None, None) is None


def test_no_row_count_when_the_sink_is_not_a_full_copy() -> None:
    from binlake.config import PipelineConfig
    from binlake.events import Column, CreateTable, TableId
    from binlake.quality.reconcile import expected_rows

    config = PipelineConfig.model_validate(
        {
            "pipeline": {"name": "p"},
            "source": {"hostname": "192.0.2.1", "username": "u", "tables": ["db\\.t"],
                       "startup_mode": "latest-offset"},
        }
    )  # fmt: skip
    schema = CreateTable(TableId("db", "t"), (Column("id", "int", "int(11)", nullable=False),), ("id",))
    count = expected_rows(config, None, schema, BinlogOffset("b.000001", 4), [])  # type: ignore[arg-type]
    assert not count.checked
    assert "startup_mode: latest-offset" in count.note
