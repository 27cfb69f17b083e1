"""A regex compiled on first use: the CLI imports the parsers on every run, and most runs need few of them."""
from __future__ import annotations

import re

__all__ = ["LazyRegex"]


class LazyRegex:
    """Stands in for re.compile(pattern, flags) until a line first needs it."""

    __slots__ = ("pattern", "flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0):
        self.pattern, self.flags = pattern, flags
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def match(self, text: str, pos: int = 0):
        return (self._compiled or self.compiled()).match(text, pos)

    def search(self, text: str, pos: int = 0, endpos: int | None = None):
        compiled = self._compiled or self.compiled()
        return compiled.search(text, pos) if endpos is None else compiled.search(text, pos, endpos)

    def findall(self, text: str) -> list:
        return self.compiled().findall(text)

    def finditer(self, text: str):
        return self.compiled().finditer(text)
