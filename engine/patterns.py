"""The pattern set a scan looks for: every catalogue signature plus the structural lines the engine reads."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from gpudoctor.kb.model import Entry, Signature

STRUCT = "@"  # owner of structural patterns, which no entry owns

# A rank that lost its peer: the line that finds one, and the words that classify an error as one.
LOST_PEER = (
    r"Connection (?:closed|reset) by (?:remote )?peer|remote worker crashing|Broken pipe|Failed to recv, got 0 bytes|"
    r"communicator was aborted|remote process exited|Connection refused|ProcessGroup.*(?:aborted|shut ?down)|"
    r"NCCL communicator.*abort"
)

# Lines the engine parses to follow ranks, collectives and errors, whatever the catalogue says.
STRUCTURAL = {  # name: (regex, literals one of which every match contains; a test checks them)
    "traceback": (r"Traceback \(most recent call last\)", ("Traceback (most recent call last)",)),
    "exception": (r"\b[A-Z][A-Za-z0-9_.]*(?:Error|Exception|Interrupt)\b(?::|$)", ("Error", "Exception", "Interrupt")),
    "watchdog": (r"Watchdog caught collective operation timeout|Timeout at NCCL work|last enqueued (?:NCCL )?work",
                 ("Watchdog caught collective operation timeout", "Timeout at NCCL work", "last enqueued ")),
    "gloo-timeout": (r"Timed out waiting \d+ ?ms for (?:recv|send)|\[Gloo\] .*(?:timed out|Timeout)|Gloo connectFullMesh failed",
                     ("Timed out waiting ", "[Gloo] ", "Gloo connectFullMesh failed")),
    "init-complete": (r"Init COMPLETE", ("Init COMPLETE",)),
    "nccl-warn": (r" NCCL WARN ", (" NCCL WARN ",)),
    "lost-peer": (LOST_PEER, ("Connection ", "Connection refused", "remote worker crashing", "Broken pipe", "Failed to recv, got 0 bytes",
                              "communicator was aborted", "remote process exited", "ProcessGroup", "NCCL communicator")),
    "signal": (r"Signal \d+ \(SIG[A-Z]+\) received by PID|exitcode\s*: -\d+", (") received by PID", "exitcode")),
    "mismatch": (r"Detected mismatch between collectives on ranks", ("Detected mismatch between collectives on ranks",)),
}


@dataclass(frozen=True)
class Pattern:
    index: int  # the id hyperscan reports
    owner: str  # an entry id, or STRUCT
    name: str  # the signature id, or the structural name
    regex: str
    caseless: bool
    literals: frozenset[str] | None  # one of these occurs in every match (lower-cased when caseless)
    signature: Signature | None = None

    @property
    def single(self) -> bool:
        """Context lines only need to be seen once per block: they may be common (every NCCL line)."""
        return self.signature is not None and self.signature.context


class PatternSet:
    """Compiled once per catalogue: Python regexes for verification, hyperscan or literals for speed."""

    def __init__(self, patterns: list[Pattern]):
        self.patterns = patterns
        self._compiled: list[re.Pattern | None] = [None] * len(patterns)
        self._hs = None
        self._hs_tried = False
        self._bytes: dict[int, re.Pattern] = {}
        self.prefiltered: list[int] = []  # patterns hyperscan could only take in prefilter mode

    def bytes_regex(self, index: int) -> re.Pattern:
        """The pattern as a bytes regex over whole blocks, as hyperscan reads them (a superset for ^ anchors)."""
        cache = self._bytes
        if index not in cache:
            p = self.patterns[index]
            flags = re.MULTILINE | (re.IGNORECASE if p.caseless else 0)
            cache[index] = re.compile(_prefilter_regex(p.regex).encode("utf-8"), flags)
        return cache[index]

    def regex(self, index: int) -> re.Pattern:
        """The Python regex of one pattern, compiled the first time a line needs it."""
        compiled = self._compiled[index]
        if compiled is None:
            p = self.patterns[index]
            compiled = self._compiled[index] = re.compile(p.regex, re.IGNORECASE if p.caseless else 0)
        return compiled

    @classmethod
    def from_entries(cls, entries: Iterable[Entry]) -> "PatternSet":
        patterns: list[Pattern] = []
        for name, (regex, literals) in STRUCTURAL.items():
            patterns.append(Pattern(len(patterns), STRUCT, name, regex, False, frozenset(literals)))
        for entry in entries:
            for sig in entry.signatures:
                if sig.derived:
                    continue  # computed from the whole log set, not matched line by line
                # literals and case were worked out when the catalogue was loaded (and cached)
                patterns.append(Pattern(
                    len(patterns), entry.id, sig.id, sig.pattern, sig.caseless, frozenset(sig.literals), sig,
                ))
        return cls(patterns)

    def hyperscan(self):
        """A hyperscan block-mode database of every pattern, or None where hyperscan is unavailable.

        Compiling takes a quarter of a second, so the serialized database is cached beside the
        catalogue cache, keyed by the exact expressions and flags.
        """
        if self._hs_tried:
            return self._hs
        self._hs_tried = True
        try:
            import hyperscan
        except ImportError:
            return None
        exprs, flags = [], []
        for p in self.patterns:
            exprs.append(_prefilter_regex(p.regex).encode("utf-8"))
            flags.append((hyperscan.HS_FLAG_CASELESS if p.caseless else 0) | hyperscan.HS_FLAG_MULTILINE
                         | (hyperscan.HS_FLAG_SINGLEMATCH if p.single else 0))
        ids = [p.index for p in self.patterns]
        cache = _hs_cache_path(exprs, flags, ids)
        if cache is not None and cache.is_file():
            try:
                db = hyperscan.loadb(cache.read_bytes(), mode=hyperscan.HS_MODE_BLOCK)
                db.scratch = hyperscan.Scratch(db)
                self._hs = db
                return db
            except Exception:  # a stale or damaged cache is rebuilt below
                pass
        db = self._compile_hs(hyperscan, exprs, flags, ids)
        if db is None:  # the literal path gives the same findings
            return None
        if cache is not None:
            _write_bytes(cache, hyperscan.dumpb(db))
        self._hs = db
        return db

    def _compile_hs(self, hyperscan, exprs, flags, ids):
        """Exact matching where hyperscan can take an expression as written; prefilter mode (a
        superset that Python verifies line by line) only for the few it cannot."""
        def build(all_flags):
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=all_flags)
            return db

        try:
            return build(flags)
        except Exception:
            pass
        mixed = list(flags)
        for k, (expr, flag) in enumerate(zip(exprs, flags)):
            try:
                hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK).compile(expressions=[expr], ids=[0], elements=1,
                                                                          flags=[flag])
            except Exception:
                mixed[k] = flag | hyperscan.HS_FLAG_PREFILTER
        self.prefiltered = [ids[k] for k in range(len(ids)) if mixed[k] != flags[k]]
        try:
            return build(mixed)
        except Exception:
            return None

    def literal_table(self):
        """(case-sensitive literals, caseless literals, patterns with no literal, single-match patterns)
        for the pure-Python path."""
        exact: dict[str, list[int]] = {}
        folded: dict[str, list[int]] = {}
        bare: list[int] = []
        singles: list[Pattern] = []
        for p in self.patterns:
            if not p.literals:
                bare.append(p.index)
                continue
            if p.single:
                singles.append(p)
                continue
            table = folded if p.caseless else exact
            for lit in p.literals:
                table.setdefault(lit, []).append(p.index)
        return sorted(exact.items()), sorted(folded.items()), bare, singles


def _hs_cache_path(exprs: list[bytes], flags: list[int], ids: list[int]):
    import hashlib

    from gpudoctor.kb.catalog import cache_dir

    root = cache_dir()
    if root is None:
        return None
    digest = hashlib.sha256(repr((exprs, flags, ids)).encode()).hexdigest()[:20]
    return root / f"hyperscan-{digest}.db"


def _write_bytes(path, data: bytes) -> None:
    import os
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".hs-", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # no cache, just a slower start next time


def _prefilter_regex(regex: str) -> str:
    # Python verifies each line's text with its prefixes stripped, so a leading ^ means "start of
    # the body", which hyperscan cannot see in the raw line: drop it to keep a superset.
    return re.sub(r"^((?:\(\?[a-zA-Z]+\))?)\^", r"\1", regex)
