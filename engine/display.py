"""Make log text safe to read: strip ANSI escapes, find the visible part of a line, escape other controls."""
from __future__ import annotations

import re

from gpudoctor.engine.lazyregex import LazyRegex
from gpudoctor.engine.regexcache import compile as compile_regex

__all__ = ["ANSI_PATTERN", "strip_ansi", "strip_ansi_bytes", "visible_text", "clean_for_display", "line_ending_len"]

# CSI (colours, cursor moves), OSC (titles, hyperlinks), the two-byte escapes, and a stray ESC on
# its own: removing every ESC means removal cannot splice a new sequence. An OSC never runs past a
# newline, so the same pattern strips whole blocks of lines without changing their line count.
ANSI_PATTERN = r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])?"
_ANSI = LazyRegex(ANSI_PATTERN)
_ANSI_BYTES: re.Pattern[bytes] | None = None  # compiled when a block first holds an ESC


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (and any ESC character left over)."""
    if "\x1b" not in text:
        return text
    return _ANSI.sub("", text)


def strip_ansi_bytes(data: bytes | bytearray) -> bytes:
    """strip_ansi for raw bytes (a block of lines; newlines are never removed)."""
    global _ANSI_BYTES
    if _ANSI_BYTES is None:
        _ANSI_BYTES = compile_regex(ANSI_PATTERN.encode("ascii"))
    return _ANSI_BYTES.sub(b"", data)


def line_ending_len(line: str) -> int:
    """How many characters of \\r and \\n end the line."""
    end = len(line)
    while end and line[end - 1] in "\r\n":
        end -= 1
    return len(line) - end


def visible_text(line: str) -> str:
    """The part of a line that prefixes are read from: no ANSI, no line ending, and
    only what follows the last carriage return (a progress bar redrawn with `\\r`
    leaves the real log record after its last `\\r`)."""
    text = strip_ansi(line).rstrip("\r\n")
    cr = text.rfind("\r")
    if cr != -1 and cr + 1 < len(text):
        text = text[cr + 1 :]
    return text


def _display_table() -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in range(0x20)}
    table[0x09] = "\t"  # tabs are harmless and common in logs
    table[0x0A] = "\\n"
    table[0x0D] = "\\r"
    table[0x7F] = "\\x7f"
    table.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})
    # bidirectional overrides can make a line read differently from what it says
    table.update({c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})
    return table


_DISPLAY = _display_table()


def clean_for_display(line: str) -> str:
    """Remove ANSI codes and the line ending; show other control characters as escapes."""
    return strip_ansi(line).rstrip("\r\n").translate(_DISPLAY)
