"""Rows of a source table as rows of its sink table: by column name, after schema changes.

The sink's schema can differ from the source's (``schema/behaviors.py``: lenient keeps dropped
columns and gives incompatible type changes a column of their own, ignore changes nothing), so
every row the stream or a backfill writes is projected onto the sink's schema first.
"""

from __future__ import annotations

import pyarrow as pa


def project(rows: pa.Table, sink: pa.Schema) -> pa.Table:
    """Rows of the source's schema → the sink's schema, by column name.

    A sink column the rows lack, or whose type the rows' column cannot widen into safely, is null;
    a ``<name>__<type>`` column (lenient's home for an incompatible type change) takes ``name``.
    Arrays whose type already fits (``string`` for ``large_string``) pass unchanged.
    """
    by_name = {name: rows.column(name) for name in rows.column_names}
    arrays, fields = [], []
    for field in sink:
        source = by_name.get(field.name)
        if source is None and "__" in field.name:
            source = by_name.get(field.name.rsplit("__", 1)[0])
        if source is not None and _fits(source.type, field.type):
            same = _family(source.type) == _family(field.type)
            arrays.append(source if same else source.cast(field.type))
            fields.append(pa.field(field.name, source.type if same else field.type))
        else:
            arrays.append(pa.nulls(rows.num_rows, field.type))
            fields.append(pa.field(field.name, field.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _family(t: pa.DataType) -> object:
    if t in (pa.string(), pa.large_string()):
        return "string"
    if t in (pa.binary(), pa.large_binary()):
        return "binary"
    return t


def _fits(have: pa.DataType, want: pa.DataType) -> bool:
    if have == want:
        return True
    if pa.types.is_integer(have) and pa.types.is_integer(want):
        return bool(want.bit_width >= have.bit_width)
    if pa.types.is_floating(have) and pa.types.is_floating(want):
        return bool(want.bit_width >= have.bit_width)
    if pa.types.is_decimal(have) and pa.types.is_decimal(want):
        return bool(want.scale == have.scale and want.precision >= have.precision)
    if pa.types.is_timestamp(have) and pa.types.is_timestamp(want):
        return bool(have.tz == want.tz or (have.tz is None) == (want.tz is None))
    return _family(have) == _family(want) and _family(have) in ("string", "binary")
