"""Every version of every captured table's schema, with the binlog position it began at."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, delete, select
from sqlalchemy.engine import Connection, Engine

from binlake.events import CreateTable, TableId, table_from_dict, table_to_dict
from binlake.offsets import BinlogOffset
from binlake.state.tables import (
    offset_from_text,
    offset_text,
    replace_row,
    schema_history_table,
    sortable,
    utc_now,
)


@dataclass(frozen=True)
class SchemaVersion:
    """A table's schema from ``offset`` on (None: the table does not exist there)."""

    table: TableId
    offset: BinlogOffset
    schema: CreateTable | None
    cause: str


class SchemaHistory:
    """The schema history of one pipeline (``StateStore.schema_history``)."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def record(self, table: TableId, offset: BinlogOffset, schema: CreateTable | None, cause: str) -> None:
        """Store ``table``'s schema from ``offset`` on (idempotent: a replay records it once)."""
        with self.engine.begin() as conn:
            self._write(conn, table, offset, schema, cause)

    def at(self, table: TableId, offset: BinlogOffset) -> SchemaVersion | None:
        """The version of ``table`` in force at ``offset`` (None: no version recorded up to there)."""
        return self._latest(table, schema_history_table.c.at <= sortable(offset))

    def before(self, table: TableId, offset: BinlogOffset) -> SchemaVersion | None:
        """The version of ``table`` in force just before ``offset`` (a statement there: the schema
        it changed, whether or not its own version is recorded yet)."""
        return self._latest(table, schema_history_table.c.at < sortable(offset))

    def _latest(self, table: TableId, up_to: ColumnElement[bool]) -> SchemaVersion | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(schema_history_table)
                .where(
                    schema_history_table.c.pipeline == self.pipeline,
                    schema_history_table.c.table_name == table.name,
                    up_to,
                )
                .order_by(schema_history_table.c.at.desc())
                .limit(1)
            ).first()
        return None if row is None else _version(table, row)

    def versions(self, table: TableId | None = None) -> list[SchemaVersion]:
        """Every recorded version (of one table, or of all), oldest first."""
        query = select(schema_history_table).where(schema_history_table.c.pipeline == self.pipeline)
        if table is not None:
            query = query.where(schema_history_table.c.table_name == table.name)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(schema_history_table.c.at)).all()
        return [_version(TableId.parse(r.table_name), r) for r in rows]

    def current(self) -> dict[TableId, SchemaVersion]:
        """Each table's latest version, of the tables that exist there (not dropped or renamed away)."""
        latest: dict[TableId, SchemaVersion] = {}
        for version in self.versions():  # oldest first: the last one stays
            latest[version.table] = version
        return {t: v for t, v in latest.items() if v.schema is not None}

    def delete(self) -> None:
        """Forget every version (a new snapshot starts a new history)."""
        with self.engine.begin() as conn:
            conn.execute(delete(schema_history_table).where(schema_history_table.c.pipeline == self.pipeline))

    def restart(self, offset: BinlogOffset, schemas: Mapping[TableId, CreateTable], cause: str) -> None:
        """Forget every version and record ``schemas`` from ``offset`` on, in one transaction (a
        new snapshot's history begins with the schemas it read)."""
        with self.engine.begin() as conn:
            conn.execute(delete(schema_history_table).where(schema_history_table.c.pipeline == self.pipeline))
            for table, schema in schemas.items():
                self._write(conn, table, offset, schema, cause)

    def _write(
        self, conn: Connection, table: TableId, offset: BinlogOffset, schema: CreateTable | None, cause: str
    ) -> None:
        key = {"pipeline": self.pipeline, "table_name": table.name, "at": sortable(offset)}
        values = {
            "offset": offset_text(offset),
            "schema": None if schema is None else json.dumps(table_to_dict(schema)),
            "cause": cause,
            "recorded_at": utc_now(),
        }
        replace_row(conn, schema_history_table, key, values)


def _version(table: TableId, row: Any) -> SchemaVersion:
    offset = offset_from_text(row.offset)
    assert offset is not None
    schema = None if row.schema is None else table_from_dict(json.loads(row.schema))
    return SchemaVersion(table, offset, schema, row.cause)
