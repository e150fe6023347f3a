"""The stream's metrics without a server: bytes behind across binlog files, phases by kind, the
lag's two ends."""

from __future__ import annotations

import datetime as dt

from prometheus_client import generate_latest

from binlake.offsets import BinlogOffset
from binlake.state.stream_history import StreamBatch
from binlake.stream.metrics import StreamMetrics, bytes_behind


def test_bytes_behind_across_files() -> None:
    sizes = {"binlog.000001": 1000, "binlog.000002": 500, "binlog.000003": 300}
    head = BinlogOffset("binlog.000003", 120)
    assert bytes_behind(head, BinlogOffset("binlog.000003", 100), sizes) == 20
    assert bytes_behind(head, BinlogOffset("binlog.000001", 900), sizes) == 100 + 500 + 120
    assert bytes_behind(head, head, sizes) == 0
    assert bytes_behind(head, BinlogOffset("binlog.000004", 4), sizes) == 0  # ahead: a new file


def test_a_batch_counts_per_table_and_phase_and_the_lag_follows_the_head() -> None:
    metrics = StreamMetrics("p")
    now = dt.datetime.now(dt.UTC)
    batch = StreamBatch("run", 1, BinlogOffset("binlog.000001", 400), {"db.t": {"upserts": 3, "deletes": 1}},
                        5, 0.2, 30.0, now)  # fmt: skip
    metrics.batch(batch, {"read": 0.1, "commit db.t": 0.05, "commit db.u": 0.02, "state": 0.01})
    text = generate_latest(metrics.registry).decode()
    assert 'binlake_stream_changes_applied_total{op="upserts",pipeline="p",table="db.t"} 3.0' in text
    assert 'binlake_stream_changes_read_total{pipeline="p"} 5.0' in text
    assert 'binlake_stream_batch_phase_seconds_count{phase="commit",pipeline="p"} 1.0' in text
    assert 'binlake_stream_read_ahead_batches_total{pipeline="p"} 0.0' in text  # there from the start
    assert 'binlake_stream_commit_conflicts_total{pipeline="p"} 0.0' in text
    assert _gauge(metrics, "binlake_stream_binlog_file_number") == 1
    assert _gauge(metrics, "binlake_stream_binlog_position_bytes") == 400
    applied = metrics.registry.get_sample_value(
        "binlake_stream_table_last_change_timestamp_seconds", {"pipeline": "p", "table": "db.t"}
    )
    assert applied == now.timestamp()
    metrics.lag(1200)  # behind: the age of the newest change applied
    assert 29 <= _gauge(metrics, "binlake_stream_lag_seconds") < 40
    metrics.lag(0)  # caught up
    assert _gauge(metrics, "binlake_stream_lag_seconds") == 0
    assert _gauge(metrics, "binlake_stream_lag_bytes") == 0
    ahead = StreamBatch("run", 2, BinlogOffset("binlog.000001", 500), {}, 0, 0.1, 1.0, now, conflicts=2,
                        read_ahead=True)  # fmt: skip
    metrics.batch(ahead, {})
    text = generate_latest(metrics.registry).decode()
    assert 'binlake_stream_read_ahead_batches_total{pipeline="p"} 1.0' in text
    assert 'binlake_stream_commit_conflicts_total{pipeline="p"} 2.0' in text


def _gauge(metrics: StreamMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name, {"pipeline": "p"})
    assert value is not None
    return value
