"""Terminal output: colour only where wanted (NO_COLOR, --no-color, a tty), width, and safe text from logs."""
from __future__ import annotations

import os
import sys
TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on every run

if TYPE_CHECKING:
    from typing import TextIO

_STYLES = {
    "bold": "1", "dim": "2", "italic": "3", "underline": "4",
    "red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35", "cyan": "36",
    "heading": "1;36", "code": "33", "id": "1;33", "ok": "32", "fail": "1;31", "skip": "2",
}


def wants_color(stream: TextIO, flag: bool | None = None) -> bool:
    """--color/--no-color win; then NO_COLOR (any non-empty value), FORCE_COLOR, TERM=dumb, isatty."""
    if flag is not None:
        return flag
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def terminal_width(stream: TextIO | None = None, default: int = 80) -> int:
    """COLUMNS, else the tty's width, else 80; never below 40 nor above 120 for readable prose."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        width = int(cols)
    else:
        stream = stream or sys.stdout
        try:
            width = os.get_terminal_size(stream.fileno()).columns if stream.isatty() else default
        except (OSError, ValueError, AttributeError):
            width = default
    return max(40, min(width, 120))


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (the engine's one implementation)."""
    from gpudoctor.engine.display import strip_ansi as strip

    return strip(text)


def sanitize(text: str) -> str:
    """Make text from a log safe to print: no ANSI sequences, other controls shown as escapes."""
    from gpudoctor.engine.display import clean_for_display  # the one implementation; only log text needs it

    return clean_for_display(text)


class Out:
    """Where a command writes, and how. (A plain class: a dataclass costs start-up time on every run.)"""

    __slots__ = ("stream", "color", "width")

    def __init__(self, stream: TextIO, color: bool, width: int):
        self.stream = stream
        self.color = color
        self.width = width

    @classmethod
    def for_stream(cls, stream: TextIO, color_flag: bool | None = None) -> "Out":
        return cls(stream=stream, color=wants_color(stream, color_flag), width=terminal_width(stream))

    def style(self, text: str, *names: str) -> str:
        if not self.color or not names:
            return text
        codes = ";".join(_STYLES[n] for n in names)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def write(self, text: str = "") -> None:
        self.stream.write(text + "\n")
