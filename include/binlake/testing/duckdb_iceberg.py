"""Sink tables read by another implementation: DuckDB's own iceberg extension.

pyiceberg is binlake's writer and first reader; a table only another reader can check proves the
files binlake writes itself (position deletes, rewritten manifests, coalesced data files) follow
the Iceberg spec rather than pyiceberg's reading of it. DuckDB's extension reads metadata,
manifests, data and delete files with its own code. The extensions come from their PyPI wheels
(``duckdb-extension-iceberg``, ``-avro``, ``-parquet``, in the dev dependencies) and load from
disk with DuckDB's autoinstall and autoload off: nothing is downloaded, and a missing wheel is an
error, not a silent fallback.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

#: The extensions, in load order (the iceberg extension reads manifests with avro).
EXTENSIONS = ("parquet", "avro", "iceberg")


def connect() -> Any:
    """A DuckDB connection with the extensions loaded from their wheels."""
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for name in EXTENSIONS:
        con.execute(f"LOAD '{extension_path(name)}'")
    return con


def extension_path(name: str) -> Path:
    """The extension's file in its wheel, for the installed DuckDB release."""
    import duckdb

    module = f"duckdb_extension_{name}"
    try:
        package = importlib.import_module(module)
    except ImportError:
        raise RuntimeError(
            f"Cannot read Iceberg tables through DuckDB's own extension: {module} is not installed. "
            "Fix: `make setup` (it is in the dev dependencies of uv.lock)."
        ) from None
    folder = Path(package.__file__ or "").parent / "extensions"
    path = folder / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        built = sorted(p.name for p in folder.glob("v*"))
        raise RuntimeError(
            f"Cannot load DuckDB's {name} extension: {module} holds it for DuckDB {', '.join(built)}, "
            f"and DuckDB {duckdb.__version__} is installed. Fix: pin both to one release in pyproject.toml."
        )
    return path


def read(table: Table, con: Any | None = None) -> pa.Table:
    """The table's current snapshot as DuckDB's iceberg extension reads it, in pyiceberg's Arrow
    types (DuckDB's own differ in form only: its time zone on timestamps, its string types)."""
    con = con if con is not None else connect()
    rows = con.execute("SELECT * FROM iceberg_scan(?)", [table.metadata_location]).to_arrow_table()
    schema = table.schema().as_arrow()
    if rows.num_rows == 0 and rows.num_columns == 0:
        return schema.empty_table()
    return pa.table([rows.column(f.name).cast(f.type) for f in schema], schema=schema)
