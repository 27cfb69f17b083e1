"""The multi-pattern engines a scan can use, which are installed, and the one to pick."""
from __future__ import annotations

from gpudoctor.engine.patterns import PatternSet

__all__ = ["ENGINES", "Candidates", "Matcher", "available", "best", "make_matcher"]

# fastest first; "python" needs nothing and is always there
ENGINES = ("hyperscan", "re2", "python")

# line start offset -> (indexes of patterns that may match that line, offset just past one match)
Candidates = dict[int, tuple[set[int], int]]


class Matcher:
    """What every engine's matcher offers (an interface by shape: none subclasses this; no typing.Protocol, whose
    import costs start-up)."""

    name: str

    def candidates(self, block: bytearray | bytes, end: int) -> Candidates:
        """Lines of block[:end] that may match, each with the patterns to verify there."""


def _importable(name: str) -> bool:
    import importlib.util

    module = {"hyperscan": "hyperscan", "re2": "re2"}.get(name)
    return module is None or importlib.util.find_spec(module) is not None


def available() -> list[str]:
    """The engines installed here, fastest first (python always last)."""
    return [name for name in ENGINES if _importable(name)]


def best() -> str:
    return available()[0]


def make_matcher(patterns: PatternSet, engine: str | None = None) -> Matcher:
    """A matcher for the named engine, or the fastest one that is installed and can take the patterns."""
    order = [engine] if engine else list(ENGINES)
    for name in order:
        if name not in ENGINES:
            raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
        # each builder returns None where its module is missing: no import machinery at start-up
        if name == "hyperscan":
            from gpudoctor.engine.engine_hyperscan import HyperscanMatcher

            matcher = HyperscanMatcher.build(patterns)
        elif name == "re2":
            from gpudoctor.engine.engine_re2 import Re2Matcher

            matcher = Re2Matcher.build(patterns)
        else:
            from gpudoctor.engine.engine_python import PythonMatcher

            matcher = PythonMatcher(patterns)
        if matcher is not None:
            return matcher
    from gpudoctor.engine.engine_python import PythonMatcher

    return PythonMatcher(patterns)  # a named engine that is missing falls back to the same findings
