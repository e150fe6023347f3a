"""MySQL's date functions in Python, where binlake reproduces their results exactly:

- ``DATE_FORMAT``: every specifier but the week numbers (``%U %u %V %v %X %x``: MySQL's own week
  rules), with the server's default ``lc_time_names`` (en_US: English day and month names);
- ``TIMESTAMPADD``/``DATE_ADD``/``DATE_SUB`` by a whole number of units: a month added keeps the
  day, or takes the month's last (``2024-01-31`` + 1 month is ``2024-02-29``); past year 9999 (or
  before year 1 by days and seconds) the server's result is NULL, but months taken back into year 0
  give a date there (``UnrepresentableDateError``: no date type here holds it);
- ``TIMESTAMPDIFF``: whole units from one moment to another, truncated toward zero; months (and
  quarters, years) counted as the server counts them (``calc_time_diff``/``TIMESTAMPDIFF``: a month
  is complete once the later moment's day and time of the month reach the earlier one's)."""

from __future__ import annotations

import calendar
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


#: Microseconds per unit of ``TIMESTAMPDIFF`` (the others count months).
_MICROS = {
    "MICROSECOND": 1, "SECOND": 10**6, "MINUTE": 60 * 10**6, "HOUR": 3600 * 10**6,
    "DAY": 86_400 * 10**6, "WEEK": 7 * 86_400 * 10**6,
}  # fmt: skip
_MONTHS_PER = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}
_YEAR_ZERO = (
    " on a row, which the server returns and no date type holds. Fix: filter such rows out, or keep the "
    "result within years 1 to 9999."
)
UNITS = frozenset(_MICROS) | frozenset(_MONTHS_PER)


def timestamp_diff(unit: str, start: dt.datetime | dt.date, end: dt.datetime | dt.date) -> int:
    """``TIMESTAMPDIFF(unit, start, end)``: whole ``unit``s from ``start`` to ``end``."""
    a, b = _moment(start), _moment(end)
    if unit in _MICROS:
        micros = (b - a) // dt.timedelta(microseconds=1)
        whole = abs(micros) // _MICROS[unit]
        return whole if micros >= 0 else -whole
    later, earlier, sign = (b, a, 1) if b >= a else (a, b, -1)
    months = (later.year - earlier.year) * 12 + later.month - earlier.month
    if (later.day, later.time()) < (earlier.day, earlier.time()):
        months -= 1
    return sign * (months // _MONTHS_PER[unit])


def _moment(value: dt.datetime | dt.date) -> dt.datetime:
    """A naive moment (a TIMESTAMP in UTC, the evaluation's session time zone; a DATE at midnight)."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo is not None else value
    return dt.datetime(value.year, value.month, value.day)


#: Units whose result of a DATE stays a DATE.
DATE_UNITS = frozenset({"DAY", "WEEK", "MONTH", "QUARTER", "YEAR"})


def timestamp_add(
    unit: str, amount: int, value: dt.datetime | dt.date, as_date: bool
) -> dt.datetime | dt.date | None:
    """``TIMESTAMPADD(unit, amount, value)`` (a DATE when ``as_date``); None out of range.

    Raises:
        UnrepresentableDateError: months added or taken land in year 0, which the server returns
            and no date type here holds.
    """
    moment = _moment(value)
    if unit in _MICROS:  # the server counts days from year 1: before it, or past 9999, NULL
        try:
            moment = moment + dt.timedelta(microseconds=amount * _MICROS[unit])
        except OverflowError:
            return None
    else:  # months: year 0 is the server's too
        months = moment.year * 12 + moment.month - 1 + amount * _MONTHS_PER[unit]
        year, month = divmod(months, 12)
        if year == 0:
            raise UnrepresentableDateError(f"a date in year 0 (adding {amount} {unit}){_YEAR_ZERO}")
        if not 1 <= year <= 9999:
            return None
        last = calendar.monthrange(year, month + 1)[1]
        moment = moment.replace(year=year, month=month + 1, day=min(moment.day, last))
    return moment.date() if as_date else moment


class UnrepresentableDateError(ValueError):
    """The server's result is a date no date type here holds (year 0, a zero part, April 31st)."""
