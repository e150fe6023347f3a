"""MySQL column types → Iceberg types and a table's Iceberg schema: each follows from the column's
Arrow type (``schema/type_mapping.py``): int32 → int, int64 → long, float32 → float, float64 →
double, decimal → decimal, date32 → date, timestamp → timestamp, timestamp with zone →
timestamptz, string → string, binary → binary, bool → boolean.

A module apart from the Arrow mapping: a snapshot task's worker maps columns to Arrow and writes
Parquet, and does not import pyiceberg's types for it (a daemon's imports wait before its first
task).
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from binlake.events import Column, CreateTable
from binlake.schema.type_mapping import arrow_type


def iceberg_type(column: Column) -> IcebergType:
    """The Iceberg type of a MySQL column (follows from its Arrow type)."""
    return _iceberg_from_arrow(arrow_type(column))


def _iceberg_from_arrow(t: pa.DataType) -> IcebergType:
    if pa.types.is_boolean(t):
        return BooleanType()
    if pa.types.is_int32(t):
        return IntegerType()
    if pa.types.is_int64(t):
        return LongType()
    if pa.types.is_decimal(t):
        return DecimalType(t.precision, t.scale)
    if pa.types.is_float32(t):
        return FloatType()
    if pa.types.is_float64(t):
        return DoubleType()
    if pa.types.is_date32(t):
        return DateType()
    if pa.types.is_timestamp(t):
        return TimestamptzType() if t.tz else TimestampType()
    if pa.types.is_string(t):
        return StringType()
    if pa.types.is_binary(t):
        return BinaryType()
    raise AssertionError(f"no Iceberg type for Arrow type {t}")  # arrow_type() returns only the above


def iceberg_schema(table: CreateTable) -> Schema:
    """The Iceberg schema of a table: field ids 1…n in column order, the primary key as identifier fields.

    Primary-key columns are required (MySQL's are NOT NULL); Iceberg identifier fields must be.
    """
    fields = [
        NestedField(
            field_id=i,
            name=c.name,
            field_type=iceberg_type(c),
            required=not c.nullable or c.name in table.primary_key,
            doc=None,
        )
        for i, c in enumerate(table.columns, start=1)
    ]
    ids = [f.field_id for f in fields if f.name in table.primary_key]
    return Schema(*fields, identifier_field_ids=ids)


def identifier_columns(schema: Schema) -> list[str]:
    """The names of an Iceberg schema's identifier fields (the source's primary key), in order."""
    names = (schema.find_column_name(i) for i in schema.identifier_field_ids)
    return [n for n in names if n is not None]
