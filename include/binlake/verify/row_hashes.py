"""The sink's row hashes per data file, kept between verifications: a file is hashed once.

Iceberg never changes a data file: a table changes by adding files and position deletes. So a
file's rows, their keys and their hashes (``verify.canonical``) are the same at every
verification, and only the position deletes since say which of them are still live. A
verification reads each file's entry from here (and hashes only the files written since the last
one), applies the file's position deletes by position, and adds the live rows to their chunks.

An entry is found by everything that makes it: the table (its UUID), the data file (path, size,
rows), the columns hashed (the source's columns as they render, ``verify.canonical``'s format
version), the key, and which rows count (a routed source's, soft deletes' live rows, a history's
current versions) — anything else is a new entry, so a stale one is never read. Entries of files
a table no longer holds are removed after its verification. It is a cache: a lost or removed
folder costs one hashing of the table.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
from pyiceberg.manifest import DataFile

log = logging.getLogger(__name__)

#: Bumped when ``verify.canonical`` renders or hashes differently: every entry is then new.
FORMAT = "2"
_POS, _KEY, _HASH = "pos", "key", "hash"


@dataclass(frozen=True)
class FileHashes:
    """The rows of one data file that count (their positions in it), their keys and hashes."""

    positions: np.ndarray[Any, np.dtype[np.int64]]
    keys: pa.Array
    hashes: np.ndarray[Any, np.dtype[np.uint64]]


class RowHashCache:
    """One table's entries (a folder of Arrow files) for one way of hashing its rows.

    Args:
        folder: where the pipeline keeps them (``<work_dir>/verify-hashes``).
        table_uuid: the Iceberg table's UUID.
        spec: what the hashes are of (``hash_spec``): part of every entry's name. Each routed
            source of a shared table has a folder of its own (its verification leaves the
            others' entries alone).
    """

    def __init__(self, folder: Path, table_uuid: str, spec: dict[str, Any]) -> None:
        source = spec.get("source")
        self.folder = (
            folder / table_uuid / (hashlib.sha256(source.encode()).hexdigest()[:16] if source else "all")
        )
        self._spec = json.dumps({"format": FORMAT, **spec}, sort_keys=True, default=str)
        self._used: set[str] = set()
        self.hits = self.misses = 0

    def get(self, data_file: DataFile) -> FileHashes | None:
        path = self._entry(data_file)
        self._used.add(path.name)
        try:
            found = feather.read_table(path, memory_map=False)
        except (OSError, pa.ArrowInvalid):
            self.misses += 1
            return None
        self.hits += 1
        return FileHashes(
            np.asarray(found.column(_POS).to_numpy(), np.int64),
            found.column(_KEY).combine_chunks(),
            np.asarray(found.column(_HASH).to_numpy(), np.uint64),
        )

    def put(self, data_file: DataFile, hashes: FileHashes) -> None:
        """Keep ``hashes`` for ``data_file`` (written whole or not at all: a temporary file renamed)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._entry(data_file)
        rows = pa.table(
            {
                _POS: pa.array(hashes.positions, pa.int64()),
                _KEY: hashes.keys,
                _HASH: pa.array(hashes.hashes, pa.uint64()),
            }
        )
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
        feather.write_feather(rows, temporary, compression="uncompressed")
        os.replace(temporary, path)

    def forget_others(self) -> int:
        """Remove the entries no lookup since this object was made asked for (files the table no
        longer holds, other ways of hashing); returns how many."""
        if not self.folder.is_dir():
            return 0
        stale = [p for p in self.folder.iterdir() if p.name not in self._used]
        for path in stale:
            path.unlink(missing_ok=True)
        return len(stale)

    def _entry(self, data_file: DataFile) -> Path:
        what = (
            f"{data_file.file_path}\n{data_file.file_size_in_bytes}\n{data_file.record_count}\n{self._spec}"
        )
        return self.folder / f"{hashlib.sha256(what.encode()).hexdigest()[:40]}.arrow"


def hash_spec(
    columns: Sequence[Any], key: str, counted: Sequence[str], source: str | None, hashing: str = "md5"
) -> dict[str, Any]:
    """What makes a table's row hashes: the source columns hashed (as dataclasses), the key the
    chunks are cut by, the columns that decide which rows count, the routed source of a shared
    table (None: all rows), how each row's text is hashed (``verify.canonical.Hashing``)."""
    return {
        "columns": [asdict(c) for c in columns],
        "key": key,
        "counted": sorted(counted),
        "source": source,
        "hashing": hashing,
    }
