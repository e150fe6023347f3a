"""The source's section of a pipeline config (``source``): the server, the tables, how the
snapshot reads them and where the stream starts.

A module of its own, apart from the rest of the pipeline's models: Spark's task workers validate
this section alone (a snapshot task reconnects with it), and import nothing else of the config.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, SecretStr, field_validator, model_validator

from binlake.config.base import Model, compile_regex
from binlake.config.tls import TlsConfig

StartupMode = Literal[
    "initial", "snapshot", "latest-offset", "earliest-offset", "specific-offset", "timestamp"
]
STARTUP_MODES: tuple[str, ...] = get_args(StartupMode)

Regex = Annotated[str, Field(min_length=1)]


class StartupOffset(Model):
    file: str | None = None
    """Binlog file name (``binlog.000042``), with ``pos``."""
    pos: int | None = Field(default=None, ge=4)
    """Position in ``file`` (a transaction boundary)."""
    gtid: str | None = None
    """A GTID set (MySQL) or GTID position (MariaDB, ``0-1-42``), instead of file/pos."""

    @model_validator(mode="after")
    def _one_form(self) -> StartupOffset:
        has_file = self.file is not None or self.pos is not None
        if has_file and self.gtid is not None:
            raise ValueError("give either `file` and `pos`, or `gtid`, not both")
        if has_file and (self.file is None or self.pos is None):
            raise ValueError("`file` and `pos` go together: give both")
        if not has_file and self.gtid is None:
            raise ValueError("give `file` and `pos`, or `gtid`")
        return self


class ServerIdRange(Model):
    start: int
    """The first replica id."""
    end: int
    """The last replica id (the range holds both ends)."""

    def __len__(self) -> int:
        return self.end - self.start + 1


class SourceConfig(Model):
    type: Literal["mysql"] = "mysql"
    """Source kind: MySQL 5.7+ or MariaDB 10.5+."""
    hostname: str
    """The server to read (a primary, or a replica with ``log_slave_updates``)."""
    port: int = Field(default=3306, ge=1, le=65535)
    """The server's port."""
    username: str
    """The CDC user (least privilege: ``SELECT``, ``RELOAD``, ``SHOW DATABASES``, ``REPLICATION
    SLAVE``, ``REPLICATION CLIENT``)."""
    password: SecretStr = SecretStr("")
    """Its password (``${VAR}``; never shown by repr, logs or errors)."""
    server_id: ServerIdRange = Field(default_factory=lambda: ServerIdRange(start=5400, end=5408))
    """Replica server id(s) for binlog readers: an int or a range ``"5400-5408"``; each reader
    needs its own, so give at least as many as ``pipeline.parallelism``."""
    tables: list[Regex] = Field(min_length=1)
    """Regexes over ``database.table`` (full match) of the tables to capture."""
    tables_exclude: list[Regex] = Field(default_factory=list)
    """Regexes of tables to leave out even if ``tables`` matches them."""
    chunk_size: int | None = Field(default=None, ge=1)
    """Rows per snapshot chunk; default: as many as hold about ``chunk_bytes`` at the table's
    average row length (the server's statistics), 1,024 to 65,536 — each chunk costs a query and
    two watermarks, so narrow rows read in bigger chunks (docs/benchmarks.md)."""
    chunk_bytes: int = Field(default=8 << 20, ge=1)
    """Bytes per snapshot chunk when ``chunk_size`` is not set (at the table's average row length)."""
    fetch_size: int = Field(default=8192, ge=1)
    """Rows per batch while reading a chunk: connectorx hands its rows to Arrow this many at a time
    (each batch has a fixed cost: 1,024 read the demo shop with a fifth more CPU, docs/benchmarks.md)."""
    zero_dates: Literal["null", "reject"] = "null"
    """Zero dates (``0000-00-00``): read as NULL with a warning, or refuse the chunk or change."""
    select_reader: Literal["connectorx", "pymysql"] = "connectorx"
    """Reader of the snapshot's bulk SELECTs: ``connectorx`` (fast, Rust into Arrow) or ``pymysql``."""
    chunk_key_columns: dict[str, str] = Field(default_factory=dict)
    """``database.table`` → column to split on, for tables without a primary key."""
    startup_mode: StartupMode = "initial"
    """Where the stream starts: ``initial`` (a snapshot, then the binlog), ``snapshot`` (only the
    snapshot), ``latest-offset``, ``earliest-offset``, ``specific-offset``, ``timestamp`` (Flink
    CDC's meanings)."""
    startup_offset: StartupOffset | None = None
    """Where ``specific-offset`` starts."""
    startup_timestamp_ms: int | None = Field(default=None, ge=0)
    """Where ``timestamp`` starts: epoch milliseconds."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds a connection to the source may take to open."""
    replica_label: str | None = Field(default=None, max_length=60)
    """How binlake's binlog readers name themselves to the server (``SHOW SLAVE HOSTS``; default
    ``binlake:<pipeline>``): ``validate`` tells them from other replicas using the same ids."""
    tls: TlsConfig = Field(default_factory=TlsConfig)
    """TLS to the source (``config/tls.py``): the MySQL clients' modes, CA and client certificate."""

    @field_validator("tables", "tables_exclude")
    @classmethod
    def _check_regexes(cls, values: list[str]) -> list[str]:
        for value in values:
            compile_regex(value)
        return values

    @field_validator("server_id", mode="before")
    @classmethod
    def _parse_server_id(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("expected an integer or a range like `5400-5408`")
        if isinstance(value, int):
            return {"start": value, "end": value}
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value)
            if not match:
                raise ValueError("expected an integer or a range like `5400-5408`")
            start = int(match.group(1))
            end = int(match.group(2) or start)
            if end < start:
                raise ValueError("the range's end is below its start")
            return {"start": start, "end": end}
        return value

    @field_validator("chunk_key_columns")
    @classmethod
    def _check_chunk_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for table in value:
            if table.count(".") != 1:
                raise ValueError(f"key `{table}` must be `database.table`")
        return value

    @model_validator(mode="after")
    def _startup_needs(self) -> SourceConfig:
        if self.startup_mode == "specific-offset" and self.startup_offset is None:
            raise ValueError("`startup_mode: specific-offset` needs `startup_offset`")
        if self.startup_mode == "timestamp" and self.startup_timestamp_ms is None:
            raise ValueError("`startup_mode: timestamp` needs `startup_timestamp_ms`")
        return self
