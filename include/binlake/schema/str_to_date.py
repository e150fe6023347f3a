"""``STR_TO_DATE(text, 'format')`` as the server computes it, for the formats binlake reproduces.

The server reads the text a specifier at a time (``extract_date_time``): before each format
character it skips the text's spaces, and it stops — leaving the parts not read yet at 0 — when the
text ends. A number is read from at most its width (4 digits of a ``%Y``, 2 of a ``%m`` …, 6 of
``%f``), a sign and leading spaces included; a minus sign, or no digit, makes the result NULL. A
two-digit year is 19xx from 70, else 20xx. ``%h``/``%I``/``%l`` take an hour from 1 to 12 that
``%p`` (``AM``/``PM``, any case) turns into the day's; ``%T`` and ``%r`` read ``%H:%i:%S`` and
``%I:%i:%S %p``. Any other format character must be the text's next one (a space in the format
matches nothing). Parts out of range (month 13, minute 60 …) make it NULL; text left after the
format is ignored (a warning).

The result is a DATE when the format has no time specifier, a DATETIME (``DATETIME(6)`` with
``%f``) when it has both. What the server returns that no DATE or DATETIME can hold — a zero month
or day (``2024-05`` read as ``%Y-%m-%d``), or a day past the month's end (``2024-04-31``: the
server checks days against 31 only) — stops the transform loudly (``UnrepresentableDateError``):
no lake type holds it, and a NULL would be a silent difference.

Refused: a time-only format (the result is a TIME), the names of months and days (``%M %b %W
%a``: prefix matching), ``%D %j %w``, week numbers, ``%. %@ %#`` and ``%%`` (which the server
reads as an error).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal

from binlake.schema.date_functions import UnrepresentableDateError

#: Specifiers binlake reads as the server does.
SUPPORTED = frozenset("YymcdeHkhIlisSfpTr")
_TIME_PARTS = frozenset("HISThiklrs")  # the server's own lists (``get_date_time_result_type``)
_DATE_PARTS = frozenset("MVUXYWabcjmvuxyw")
_SPACES = frozenset(b" \t\n\v\f\r")
_SPECIFIER = re.compile(r"%(.)", re.DOTALL)
_WIDTH = {"Y": 4, "y": 2, "m": 2, "c": 2, "d": 2, "e": 2, "H": 2, "k": 2, "h": 2, "I": 2, "l": 2}
_WIDTH |= {"i": 2, "s": 2, "S": 2}
_PART = {"Y": "year", "y": "year", "m": "month", "c": "month", "d": "day", "e": "day", "i": "minute"}
_PART |= {"H": "hour", "k": "hour", "h": "hour", "I": "hour", "l": "hour", "s": "second", "S": "second"}

Kind = Literal["date", "datetime", "datetime6", "time"]


def refused_specifiers(fmt: str) -> list[str]:
    """The specifiers of ``fmt`` binlake does not read as the server does."""
    found = {f"%{m}" for m in _SPECIFIER.findall(fmt) if m not in SUPPORTED}
    if re.search(r"(?<!%)(%%)*%$", fmt):
        found.add("a trailing %")
    return sorted(found)


def result_kind(fmt: str) -> Kind:
    """What the server returns for ``fmt``: a DATE, a DATETIME (with ``%f``: of microseconds), a TIME."""
    specs = _SPECIFIER.findall(fmt)
    fraction = "f" in specs
    time = fraction or any(s in _TIME_PARTS for s in specs)
    date = any(s in _DATE_PARTS for s in specs)
    if date and time:
        return "datetime6" if fraction else "datetime"
    return "time" if time else "date"


@dataclass
class _Parts:
    year: int = 0
    month: int = 0
    day: int = 0
    hour: int = 0
    minute: int = 0
    second: int = 0
    micro: int = 0


def str_to_date(text: str, fmt: str, kind: Kind) -> dt.date | dt.datetime | None:
    """``STR_TO_DATE(text, fmt)`` (``kind``: ``result_kind(fmt)``); None where the server's is NULL.

    Raises:
        UnrepresentableDateError: the server returns a date with a zero part or past its month's end.
    """
    parts = _Parts()
    if _extract(text.encode(), 0, fmt.encode(), parts) is None:
        return None
    if parts.month > 12 or parts.day > 31 or parts.hour > 23 or parts.minute > 59 or parts.second > 59:
        return None
    try:
        day = dt.date(parts.year, parts.month, parts.day)
    except ValueError:
        raise UnrepresentableDateError(
            f"{parts.year:04d}-{parts.month:02d}-{parts.day:02d} on a row: the server returns a date with "
            "a zero part or past its month's end, which no date type holds. Fix: filter such rows out "
            "(or make the text a whole date)."
        ) from None
    if kind == "date":
        return day
    micro = parts.micro if kind == "datetime6" else 0
    return dt.datetime(day.year, day.month, day.day, parts.hour, parts.minute, parts.second, micro)


def str_to_dates(texts: list[str | None], fmt: str, kind: Kind) -> list[dt.date | dt.datetime | None]:
    """``str_to_date`` of each of ``texts`` (NULL stays NULL)."""
    return [None if text is None else str_to_date(text, fmt, kind) for text in texts]


def _extract(val: bytes, i: int, fmt: bytes, t: _Parts) -> int | None:
    """Read ``val`` from ``i`` by ``fmt`` into ``t``; the position reached, or None (NULL)."""
    usa, daypart, p, end = False, 0, 0, len(val)
    while p < len(fmt) and i < end:
        while i < end and val[i] in _SPACES:
            i += 1
        if i >= end:
            break
        if fmt[p] == ord("%") and p + 1 < len(fmt):
            p += 1
            spec = chr(fmt[p])
            usa = usa or spec in "hIl"
            found = _specifier(val, i, spec, t)
            if found is None:
                return None
            i, pm = found
            if pm is not None:
                if not usa:  # an AM/PM without a 12-hour hour before it
                    return None
                daypart = 12 if pm else 0
        elif fmt[p] not in _SPACES:
            if val[i] != fmt[p]:
                return None
            i += 1
        p += 1
    if usa:
        if not 1 <= t.hour <= 12:
            return None
        t.hour = t.hour % 12 + daypart
    return i


def _specifier(val: bytes, i: int, spec: str, t: _Parts) -> tuple[int, bool | None] | None:
    """One specifier read at ``i``: the position after it and, for ``%p``, whether it said PM."""
    n = len(val) - i
    if spec in _WIDTH:
        value, j = _number(val, i, i + min(_WIDTH[spec], n))
        if value is None:
            return None
        if spec == "y" or (spec == "Y" and j - i <= 2):
            value += 2000 if value < 70 else 1900 if value < 100 else 0
        setattr(t, _PART[spec], value)
        return j, None
    if spec == "f":
        value, j = _number(val, i, i + min(6, n))
        if value is None:
            return None
        t.micro = value * 10 ** (6 - (j - i))
        return j, None
    if spec == "p":
        if n < 2 or val[i : i + 2].upper() not in (b"AM", b"PM"):
            return None
        return i + 2, val[i : i + 2].upper() == b"PM"
    if spec in "Tr":
        reached = _extract(val, i, b"%H:%i:%S" if spec == "T" else b"%I:%i:%S %p", t)
        return None if reached is None else (reached, None)
    return None  # refused at compile time; the server's NULL


def _number(val: bytes, i: int, end: int) -> tuple[int | None, int]:
    """The server's ``my_strtoll10`` within ``[i, end)``: leading spaces and tabs, a sign, digits.
    None for no digit or a minus sign (the server's error)."""
    s = i
    while s < end and val[s] in b" \t":
        s += 1
    negative = s < end and val[s] == ord("-")
    if s < end and val[s] in b"+-":
        s += 1
    digits = s
    while s < end and 0x30 <= val[s] <= 0x39:
        s += 1
    if s == digits or negative:
        return None, i
    return int(val[digits:s]), s
