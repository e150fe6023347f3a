"""A pipeline's named binlog offsets (``state.offset_names``) and small named notes beside them."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection, Engine

from binlake.offsets import BinlogOffset
from binlake.state.tables import aware, offset_from_text, offset_text, offsets_table, replace_row, utc_now


class Offsets:
    """The named offsets of one pipeline (``StateStore.offsets``)."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def save(self, name: str, offset: BinlogOffset, forget: Sequence[str] = ()) -> None:
        """Store a named offset (``switch``: where the stream starts after the snapshot), and drop
        the offsets named in ``forget`` in the same transaction."""
        with self.engine.begin() as conn:
            key = {"pipeline": self.pipeline, "name": name}
            replace_row(conn, offsets_table, key, {"offset": offset_text(offset), "updated_at": utc_now()})
            self._delete(conn, forget)

    def load(self, name: str) -> BinlogOffset | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(offsets_table.c.offset).where(
                    offsets_table.c.pipeline == self.pipeline, offsets_table.c.name == name
                )
            ).first()
        return None if row is None else offset_from_text(row[0])

    def load_record(self, name: str) -> tuple[BinlogOffset, dt.datetime] | None:
        """A named offset with the time it was stored."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(offsets_table.c.offset, offsets_table.c.updated_at).where(
                    offsets_table.c.pipeline == self.pipeline, offsets_table.c.name == name
                )
            ).first()
        if row is None:
            return None
        offset = offset_from_text(row[0])
        assert offset is not None
        return offset, aware(row[1])

    def save_note(self, name: str, note: dict[str, Any]) -> None:
        """Store a small named document beside the offsets (``stream.binlog``: the identity of the
        binlog the stream's offset is in)."""
        with self.engine.begin() as conn:
            key = {"pipeline": self.pipeline, "name": f"note:{name}"}
            replace_row(conn, offsets_table, key, {"offset": json.dumps(note), "updated_at": utc_now()})

    def load_note(self, name: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(offsets_table.c.offset).where(
                    offsets_table.c.pipeline == self.pipeline, offsets_table.c.name == f"note:{name}"
                )
            ).first()
        return None if row is None else dict(json.loads(row[0]))

    def delete(self, name: str) -> None:
        with self.engine.begin() as conn:
            self._delete(conn, [name])

    def _delete(self, conn: Connection, names: Sequence[str]) -> None:
        for name in names:
            conn.execute(
                delete(offsets_table).where(
                    offsets_table.c.pipeline == self.pipeline, offsets_table.c.name == name
                )
            )
