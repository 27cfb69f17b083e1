"""A regex compiled on first use: the CLI imports the parsers on every run, and most runs need few of them."""
from __future__ import annotations

import re

__all__ = ["LazyRegex"]


class LazyRegex:
    """Stands in for re.compile(pattern, flags) until a line first needs it.

    It offers what a module-level pattern is used for (match, search, fullmatch, finditer, findall, sub, subn,
    split, and `.pattern`/`.flags` for joining patterns) and pickles as its source. It is not an re.Pattern:
    a match's `.re` is the compiled pattern, so compare `.re.pattern`, never `m.re is LAZY`; pass
    `.compiled()` where an API wants a real pattern (re.sub(lazy, ...) raises TypeError).
    """

    __slots__ = ("pattern", "flags", "_compiled")

    def __init__(self, pattern: str | bytes, flags: int = 0):
        self.pattern, self.flags = pattern, flags
        self._compiled: re.Pattern | None = None

    def compiled(self) -> re.Pattern:
        if self._compiled is None:
            from gpudoctor.engine.regexcache import compile as compile_regex

            self._compiled = compile_regex(self.pattern, self.flags)
        return self._compiled

    def match(self, text, pos: int = 0, endpos: int | None = None):
        compiled = self._compiled or self.compiled()
        return compiled.match(text, pos) if endpos is None else compiled.match(text, pos, endpos)

    def search(self, text, pos: int = 0, endpos: int | None = None):
        compiled = self._compiled or self.compiled()
        return compiled.search(text, pos) if endpos is None else compiled.search(text, pos, endpos)

    def fullmatch(self, text, pos: int = 0, endpos: int | None = None):
        compiled = self._compiled or self.compiled()
        return compiled.fullmatch(text, pos) if endpos is None else compiled.fullmatch(text, pos, endpos)

    def findall(self, text, pos: int = 0, endpos: int | None = None) -> list:
        compiled = self.compiled()
        return compiled.findall(text, pos) if endpos is None else compiled.findall(text, pos, endpos)

    def finditer(self, text, pos: int = 0, endpos: int | None = None):
        compiled = self.compiled()
        return compiled.finditer(text, pos) if endpos is None else compiled.finditer(text, pos, endpos)

    def sub(self, repl, text, count: int = 0):
        return self.compiled().sub(repl, text, count)

    def subn(self, repl, text, count: int = 0):
        return self.compiled().subn(repl, text, count)

    def split(self, text, maxsplit: int = 0) -> list:
        return self.compiled().split(text, maxsplit)

    @property
    def groups(self) -> int:
        return self.compiled().groups

    @property
    def groupindex(self):
        return self.compiled().groupindex

    def __reduce__(self):  # pickled as its source: a worker process compiles it again when it needs it
        return (LazyRegex, (self.pattern, self.flags))

    def __eq__(self, other) -> bool:
        if isinstance(other, LazyRegex):
            return (self.pattern, self.flags) == (other.pattern, other.flags)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.pattern, self.flags))

    def __repr__(self) -> str:
        return f"LazyRegex({self.pattern!r}, {self.flags!r})"
