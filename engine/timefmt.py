"""Read the timestamps log prefixes print: ISO dates, glog and syslog times, into epoch or day seconds."""
from __future__ import annotations

import re

from gpudoctor.engine.lazyregex import LazyRegex

__all__ = ["MONTHS", "ISO", "GLOG_TIME", "iso_to_epoch", "seconds_of_day", "epoch"]

MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}
# ISO-ish date and time; the `_` separator is what torchelastic's failure summary prints
ISO = (
    r"(\d{4})[-/](\d\d)[-/](\d\d)[T _](\d\d):(\d\d)(?::(\d\d)(?:[.,](\d{1,9}))?)?"
    r"(Z|[+-]\d\d:?\d\d(?![\d:]))?"
)
# c10 prints the month unpadded ("E626"), glog pads it ("I0501")
GLOG_TIME = r"(\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
_ISO_ALONE = LazyRegex(ISO, re.ASCII)


def _days_from_civil(y: int, m: int, d: int) -> int:
    # Howard Hinnant's algorithm: days since 1970-01-01 without datetime's overhead
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def seconds_of_day(h: str, mi: str, s: str | None, frac: str | None) -> float | None:
    """Seconds since midnight, or None for an impossible time."""
    hh, mm, ss = int(h), int(mi), int(s) if s else 0
    if hh > 23 or mm > 59 or ss > 60:
        return None
    value = hh * 3600 + mm * 60 + ss
    return value + int(frac) / 10 ** len(frac) if frac else float(value)


def _tz_offset(tz: str | None) -> int:
    if not tz or tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)


def epoch(y: str, mo: str | int, d: str, day: float | None, tz: str | None = None) -> float | None:
    """Epoch seconds of a date and a time of day (naive times read as UTC), or None when impossible."""
    year, month, dom = int(y), int(mo), int(d)
    if day is None or not (1 <= month <= 12 and 1 <= dom <= 31):
        return None
    return _days_from_civil(year, month, dom) * 86400 + day - _tz_offset(tz)


def iso_to_epoch(text: str) -> float | None:
    """Epoch seconds of an ISO-like timestamp at the start of `text` (naive times read as UTC)."""
    m = _ISO_ALONE.match(text)
    if m is None:
        return None
    y, mo, d, h, mi, s, frac, tz = m.groups()
    return epoch(y, mo, d, seconds_of_day(h, mi, s, frac), tz)
