"""Rejoin the rows of a hard-wrapped paste (a terminal or web page cut long lines at its width) before matching."""
from __future__ import annotations

from gpudoctor.engine.lazyregex import LazyRegex
from gpudoctor.engine.patterns import STRUCTURAL
from gpudoctor.engine.prefix import parse_prefix

__all__ = ["WIDTHS", "detect_width", "rejoin"]

# terminal and page widths people paste from
WIDTHS = (80, 100, 120, 132, 140, 150, 160, 180, 200, 220, 240, 250, 256)
_SAMPLE_LINES = 4000
_MIN_FULL_ROWS = 1
# a Python exception line opens a record of its own: after a frame row that happens to be exactly a terminal width
# wide, it is the traceback's error, not the rest of the frame
_EXCEPTION_LINE = LazyRegex(STRUCTURAL["exception"][0])  # the scanner's own exception-line pattern


def detect_width(sample: bytes) -> int | None:
    """The width a paste was wrapped at: no row is longer, and several rows are exactly that long
    (a log written by a program has some lines longer than any terminal, and few of one exact length)."""
    rows = sample.split(b"\n", _SAMPLE_LINES)[:_SAMPLE_LINES]
    if len(rows) > 1 and not sample.endswith(b"\n"):
        rows = rows[:-1]  # the sample may stop inside a row
    if not rows:
        return None
    # every step runs once per scanned file (a directory of per-rank logs has thousands): C-level loops only
    lengths = list(map(len, rows))
    longest = max(lengths)
    if longest > 4 * WIDTHS[-1]:
        return None  # cheap and common: a line longer than any terminal, even in multi-byte characters
    if sample.isascii() and b"\t" not in sample:
        if longest not in WIDTHS and longest - 1 not in WIDTHS:  # (a \r may end the longest row)
            return None
        if b"\r" in sample:
            lengths = [len(r.rstrip(b"\r")) for r in rows]
    else:
        lengths = [len(r.decode("utf-8", "replace").rstrip("\r").expandtabs(8)) for r in rows]
    longest = max(lengths)
    if longest not in WIDTHS:
        return None
    full = lengths.count(longest)
    # rows exactly at the width, several of them and a fair share of the long ones
    near = sum(map((longest * 3 // 4).__lt__, lengths))
    return longest if full >= _MIN_FULL_ROWS and full * 3 >= near else None


def _continues(row: str) -> bool:
    """A row that carries on the one before: it starts no new record (no timestamp, rank or level prefix,
    no traceback frame, header or exception line of its own)."""
    if not row:
        return False
    p = parse_prefix(row)
    if p.kinds and p.kinds != ("indent",):
        return False
    body = p.body.lstrip()
    if body.startswith(("File \"", "Traceback (most recent call last)", "During handling", "The above exception")):
        return False
    # an unindented exception line is the traceback's error, not the rest of the row before
    return not (body == p.body and _EXCEPTION_LINE.match(body))


def rejoin(block: bytes, width: int) -> bytes:
    """block with each row that is exactly `width` wide joined to the rows that continue it. A join
    moves the newline to after the joined line, so every later line keeps its number and a joined
    line is reported at its first row."""
    rows = block.decode("utf-8", "surrogateescape").split("\n")
    out: list[str] = []
    owed = 0  # newlines to restore after the current logical line
    i = 0
    while i < len(rows):
        line = rows[i]
        while (i + 1 < len(rows) and len(rows[i].rstrip("\r").expandtabs(8)) == width
               and _continues(rows[i + 1].rstrip("\r"))):
            line = line.rstrip("\r") + rows[i + 1]
            owed += 1
            i += 1
        out.append(line)
        out.extend([""] * owed)
        owed = 0
        i += 1
    return "\n".join(out).encode("utf-8", "surrogateescape")
