"""Which column types a sink table may widen a column to in place: Iceberg's safe promotions, as
binlake takes them (the upsert table's applier, a state table's, and the changelog and history
following a sink table's promotions all ask here)."""

from __future__ import annotations

from pyiceberg.types import DecimalType, DoubleType, FloatType, IcebergType, IntegerType, LongType


def promotion_refused(current: IcebergType, wanted: IcebergType) -> str | None:
    """Why ``current`` cannot become ``wanted`` in place (None: it can, a safe promotion): int →
    long, float → double, a decimal's precision up at the same scale."""
    if isinstance(current, IntegerType) and isinstance(wanted, LongType):
        return None
    if isinstance(current, FloatType) and isinstance(wanted, DoubleType):
        return None
    if isinstance(current, DecimalType) and isinstance(wanted, DecimalType):
        if wanted.scale != current.scale:
            # pyiceberg 0.12 accepts this, but a scale change reinterprets every stored value.
            return f"a decimal scale change ({current} → {wanted}) would change every stored value"
        if wanted.precision > current.precision:
            return None
    return f"{current} → {wanted} is not a safe type promotion"


def is_promotion(have: IcebergType, wanted: IcebergType) -> bool:
    """Whether ``wanted`` is ``have`` widened (another type: not, a column replaced)."""
    return have != wanted and promotion_refused(have, wanted) is None
