"""Per-batch commit cost of small stream batches, with and without the manifest-entry cache, as JSON.

    .venv/bin/python bench/commit_overhead.py [--batches 60] [--rows 3000] [--changes 60]

The stream's steady state is many small batches into the same tables, each a commit that plans
the table (reading every manifest) at least twice. This runs ``--batches`` batches of ``--changes``
upserts into a ``--rows``-row table in both merge modes, once reading manifests every time and once
through ``pyiceberg_internals.cache_manifest_entries`` (same run, same data): the median seconds
per batch of the last half (manifests accumulate until ``stream.merge_manifests_at``, 32).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pyiceberg.manifest import ManifestFile

from binlake.offsets import BinlogOffset
from binlake.sink.pyiceberg_internals import cache_immutable_files, cache_manifest_entries
from binlake.sink.writer import IcebergWriter

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.sink.helpers import create, make_catalog, rows  # the sink tests' table builders


def _run(mode: str, batches: int, size: int, changes: int) -> float:
    with tempfile.TemporaryDirectory(prefix="binlake-bench-") as work:
        catalog = make_catalog(Path(work))
        identifier = create(catalog, "t", properties={"write.merge.mode": mode})
        writer = IcebergWriter(catalog, identifier, merge_manifests_at=32, key_index_dir=Path(work) / "index")
        writer.merge_batch(0, rows(list(range(size)), "a"), offset=BinlogOffset("b.000001", 1))
        rng = random.Random(7)
        seconds = []
        for batch in range(1, batches + 1):
            ids = sorted(rng.sample(range(size), changes))
            started = time.monotonic()
            writer.merge_batch(batch, rows(ids, f"b{batch}"), offset=BinlogOffset("b.000001", 1 + batch))
            seconds.append(time.monotonic() - started)
        return statistics.median(seconds[batches // 2 :])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--changes", type=int, default=60)
    args = parser.parse_args()
    cache_immutable_files()  # as binlake's jobs start (spark/entry.py): the one patch of pyiceberg
    cache = cache_manifest_entries()
    cached_fetch = ManifestFile.fetch_manifest_entry
    result: dict[str, object] = {"benchmark": "commit_overhead", "rows": args.rows, "changes": args.changes}
    for mode in ("copy-on-write", "merge-on-read"):
        ManifestFile.fetch_manifest_entry = cache._read  # type: ignore[method-assign]
        without = _run(mode, args.batches, args.rows, args.changes)
        ManifestFile.fetch_manifest_entry = cached_fetch  # type: ignore[method-assign]
        with_cache = _run(mode, args.batches, args.rows, args.changes)
        result[mode] = {
            "median_s_per_batch_without_cache": round(without, 4),
            "median_s_per_batch_with_cache": round(with_cache, 4),
            "speedup": round(without / with_cache, 2),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
