"""binlake verify: proves the lake equals the source, chunk by chunk (ARCHITECTURE.md step 8)."""

from __future__ import annotations

from binlake.errors import BinlakeError


class VerifyError(BinlakeError):
    """A verification cannot run (saying why and what to do)."""
