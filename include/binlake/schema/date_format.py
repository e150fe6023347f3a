"""MySQL's ``DATE_FORMAT`` in Python, for the specifiers whose result binlake reproduces exactly:
every one but the week numbers (``%U %u %V %v %X %x``: MySQL's own week rules), with the server's
default ``lc_time_names`` (en_US: English day and month names)."""

from __future__ import annotations

import datetime as dt
import re

#: Specifiers binlake does not reproduce.
REFUSED = frozenset("UuVvXx")
_SPECIFIER = re.compile(r"%(.)", re.DOTALL)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)  # fmt: skip


def refused_specifiers(fmt: str) -> list[str]:
    """The specifiers of ``fmt`` binlake does not reproduce (``%U``…)."""
    return sorted({f"%{m}" for m in _SPECIFIER.findall(fmt) if m in REFUSED})


def date_format(value: dt.datetime | dt.date, fmt: str) -> str:
    """``DATE_FORMAT(value, fmt)`` as the server computes it (a DATE's time parts are zero)."""
    moment = value if isinstance(value, dt.datetime) else dt.datetime(value.year, value.month, value.day)
    return _SPECIFIER.sub(lambda m: _field(moment, m.group(1)), fmt)


def _field(t: dt.datetime, spec: str) -> str:
    hour12 = (t.hour + 11) % 12 + 1
    fields = {
        "a": _DAYS[t.weekday()][:3], "b": _MONTHS[t.month - 1][:3], "c": str(t.month),
        "D": f"{t.day}{_suffix(t.day)}", "d": f"{t.day:02d}", "e": str(t.day), "f": f"{t.microsecond:06d}",
        "H": f"{t.hour:02d}", "h": f"{hour12:02d}", "I": f"{hour12:02d}", "i": f"{t.minute:02d}",
        "j": f"{t.timetuple().tm_yday:03d}", "k": str(t.hour), "l": str(hour12), "M": _MONTHS[t.month - 1],
        "m": f"{t.month:02d}", "p": "AM" if t.hour < 12 else "PM",
        "r": f"{hour12:02d}:{t.minute:02d}:{t.second:02d} {'AM' if t.hour < 12 else 'PM'}",
        "S": f"{t.second:02d}", "s": f"{t.second:02d}", "T": f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}",
        "W": _DAYS[t.weekday()], "w": str((t.weekday() + 1) % 7), "Y": f"{t.year:04d}",
        "y": f"{t.year % 100:02d}",
    }  # fmt: skip
    return fields.get(spec, spec)  # `%%` is `%`, an unknown `%x` is `x`


def _suffix(day: int) -> str:
    if day in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
