"""What the server does for the binlog's integrity: event checksums, which binlake verifies."""

from __future__ import annotations

from binlake.source.server.checks import Check


def checksum_check(value: str | None) -> Check:
    """``binlog_checksum``: CRC32 lets binlake check every event it reads (a damaged one stops the
    read, naming it: ``source/binlog/transport.py``); NONE leaves damage on disk or the wire unseen."""
    if (value or "").upper() == "CRC32":
        return Check("binlog_checksum", "ok", "CRC32: every event's checksum is verified as it is read")
    return Check(
        "binlog_checksum",
        "warning",
        f"found {value or 'absent'}: events carry no checksum, so a binlog damaged on disk or on the "
        "way cannot be told from a real change",
        "`SET GLOBAL binlog_checksum = 'CRC32'` (the default of MySQL 5.6.6+ and MariaDB 10.2+), "
        "and `binlog_checksum = CRC32` in my.cnf",
    )
