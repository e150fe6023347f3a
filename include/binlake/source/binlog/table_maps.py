"""Table-map events parsed once per distinct body, not once per transaction.

The server writes a ``TABLE_MAP_EVENT`` before the rows of every table a statement changes: a
stream of 10-row transactions holds about one table map per row change. python-mysql-replication
1.0.17 parses each one in full (column types, metadata, FULL row metadata's names and charsets,
two ``Table`` objects): measured by ``bench/segment_read.py``, half of a segment read of small
transactions, and the new ``Table`` each time made binlake rebuild its decoders per event too
(their cache is keyed on the identity of the library's columns).

A table map's body — everything after the common header: table id, names, column types and
metadata, the optional metadata — fully determines what the library makes of it. So the parsed
layout is kept per body, and an event whose body was seen before takes that layout (the same
``Table`` and column objects) instead of parsing again. Equal bytes are the key: any change of the
table's shape (a DDL, a gh-ost swap's new table id) changes the bytes and is parsed afresh; there
is no way for a stale layout to be used.

Only bodies whose column names come from the event itself are kept (``binlog_row_metadata=FULL``,
which binlake requires): without them, the library looks names up in the server's current schema
and writes them into the shared columns, which would not be a function of the bytes.

The library offers no hook for this: :func:`install` wraps ``TableMapEvent.__init__`` (once per
process). Everything the original sets, the cached path sets the same way (``tests/source/
test_table_maps.py`` compares them).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

#: Distinct table-map bodies kept per process (a layout is a few KB; a stream sees one per table
#: and schema version, so this bounds memory without evicting anything a stream still uses).
CAPACITY = 4096

#: The attributes a parse sets from the body: a cached event takes them over.
_LAYOUT = (
    "table_id",
    "flags",
    "schema_length",
    "schema",
    "table_length",
    "table",
    "column_count",
    "columns",
    "null_bitmask",
    "table_obj",
    "optional_metadata",
)
#: The attributes the original sets from its keyword arguments (name-mangled: private to the class).
_SETTINGS = {
    "only_tables": None,
    "ignored_tables": None,
    "only_schemas": None,
    "ignored_schemas": None,
    "freeze_schema": False,
    "optional_meta_data": False,
    "enable_logging": False,
    "use_column_name_cache": False,
}
#: Bytes before an event's body in the packet: the OK byte and the 19-byte common header.
_BODY_AT = 20

_layouts: OrderedDict[tuple[str, bytes], dict[str, Any]] = OrderedDict()
_parse = TableMapEvent.__init__


def install() -> None:
    """Route python-mysql-replication's table-map parsing through the cache (idempotent)."""
    if TableMapEvent.__init__ is not _cached_init:
        TableMapEvent.__init__ = _cached_init


def uninstall() -> None:
    """The library's own parsing again (the single reader of the benches, tests comparing both)."""
    TableMapEvent.__init__ = _parse
    _layouts.clear()


def cached_layouts() -> int:
    """How many distinct table-map bodies are held (for tests and benches)."""
    return len(_layouts)


def _cached_init(
    self: TableMapEvent,
    from_packet: Any,
    event_size: int,
    table_map: dict[int, Any],
    ctl_connection: Any,
    **kwargs: Any,
) -> None:
    key = _key(from_packet, event_size, ctl_connection, kwargs)
    layout = _layouts.get(key) if key is not None else None
    if key is None or layout is None:
        _parse(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        if key is not None and self._processed and _names_from_event(self):
            _remember(key, {name: getattr(self, name) for name in _LAYOUT})
        return
    _layouts.move_to_end(key)
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
    for name, default in _SETTINGS.items():
        setattr(self, f"_TableMapEvent__{name}", kwargs.get(name, default))
    self.__dict__.update(layout)
    if _skipped(self, table_map, kwargs):
        self._processed = False
        return
    table_map[self.table_id] = self.table_obj


def _key(
    from_packet: Any, event_size: int, ctl_connection: Any, kwargs: dict[str, Any]
) -> tuple[str, bytes] | None:
    """The event's body with the server's kind, or None where the parse depends on more than the
    bytes (column names looked up in the server's schema)."""
    if not kwargs.get("optional_meta_data") or kwargs.get("freeze_schema"):
        return None
    data = from_packet.packet.get_all_data()
    return ctl_connection._get_dbms(), bytes(data[_BODY_AT : _BODY_AT + event_size])


def _names_from_event(event: TableMapEvent) -> bool:
    names = event.optional_metadata.column_name_list
    return len(names) == event.column_count and all(names)


def _remember(key: tuple[str, bytes], layout: dict[str, Any]) -> None:
    _layouts[key] = layout
    while len(_layouts) > CAPACITY:
        _layouts.popitem(last=False)


def _skipped(event: TableMapEvent, table_map: dict[int, Any], kwargs: dict[str, Any]) -> bool:
    """The original's filters, in its order: a table or schema the reader does not follow."""
    only_tables, ignored_tables = kwargs.get("only_tables"), kwargs.get("ignored_tables")
    only_schemas, ignored_schemas = kwargs.get("only_schemas"), kwargs.get("ignored_schemas")
    return (
        (only_tables is not None and event.table not in only_tables)
        or (ignored_tables is not None and event.table in ignored_tables)
        or (only_schemas is not None and event.schema not in only_schemas)
        or (ignored_schemas is not None and event.schema in ignored_schemas)
    )
