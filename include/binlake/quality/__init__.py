"""Data quality on every run: a great-expectations suite per sink table, Data Docs, kept results."""

from __future__ import annotations

from binlake.errors import BinlakeError


class QualityError(BinlakeError):
    """A data-quality run could not run (not: an expectation failed)."""


__all__ = ["QualityError"]
