"""The hyperscan engine: block-mode databases of every pattern, exact where it can, cached on disk."""
from __future__ import annotations

import re

from gpudoctor.engine.patterns import Pattern, PatternSet, prefilter_regex


# A context pattern whose literals ("NCCL", "[rank") are on nearly every line of the logs this tool reads. Hyperscan
# reports a single-match pattern once per block, but inside a shared database it still weighs every occurrence of its
# literals; in a database of its own it stops scanning at the first match. Measured (hyperscan time per MB, one
# database vs this one apart): 1 MB NCCL rank logs 0.41 -> 0.34 ms, NCCL INFO 0.37 -> 0.30, steps 2.32 -> 2.24,
# the mix 1.34 -> 1.14, a log with none of its words 1.97 -> 1.88. Other context patterns apart cost more than
# they save (their literals rarely all occur, so their own database reads the whole block). D28's context is the same
# expression, so it shares that database and the scan still ends at the first line that holds one of its words.
OWN_DATABASE = frozenset({("D3", "distributed-context"), ("D28", "local-ranks-context")})


class HyperscanMatcher:
    name = "hyperscan"

    def __init__(self, db, apart=()):
        self.db = db
        self.apart = tuple(apart)  # databases of single-match patterns scanned on their own

    @classmethod
    def build(cls, patterns: PatternSet) -> "HyperscanMatcher | None":
        """None where hyperscan cannot compile the set (the other engines give the same findings)."""
        if "hyperscan" not in patterns.engines:
            patterns.engines["hyperscan"] = _database(patterns)
        dbs = patterns.engines["hyperscan"]
        return None if dbs is None else cls(dbs[0], dbs[1:])

    def candidates(self, block, end: int):
        found: dict[int, tuple[set[int], int]] = {}
        ends: list[tuple[int, int]] = []

        def on_match(index, _start, end, _flags, _ctx):
            ends.append((end, index))

        with memoryview(block) as view:
            self.db.scan(view[:end], match_event_handler=on_match)
            for db in self.apart:
                db.scan(view[:end], match_event_handler=on_match)
        if self.apart:
            ends.sort()  # in offset order, as one database reports them: a line's first match gives its offset
        for at, index in ends:
            start = block.rfind(b"\n", 0, max(at - 1, 0)) + 1 if at else 0
            entry = found.get(start)
            if entry is None:
                found[start] = ({index}, at)
            else:
                entry[0].add(index)
        return found


def _database(patterns: PatternSet):
    """(main database, databases apart...), or None. Compiling takes a quarter of a second, so each serialized
    database is cached beside the catalogue cache, keyed by the exact expressions and flags."""
    try:
        import hyperscan
    except ImportError:
        return None
    apart = [p for p in patterns.patterns if p.single and (p.owner, p.name) in OWN_DATABASE]
    rest = [p for p in patterns.patterns if not (p.single and (p.owner, p.name) in OWN_DATABASE)]
    prefiltered: list[int] = []
    dbs = [_load_or_compile(hyperscan, group, prefiltered) for group in ([rest, apart] if apart else [rest])]
    if any(db is None for db in dbs):
        dbs = [_load_or_compile(hyperscan, patterns.patterns, prefiltered)]  # one database of every pattern
    patterns.engines["hyperscan-prefiltered"] = prefiltered
    return None if dbs[0] is None else tuple(dbs)


def _load_or_compile(hyperscan, group: list[Pattern], prefiltered: list[int]):
    exprs, flags = [], []
    for p in group:
        exprs.append(hyperscan_expression(p).encode("utf-8"))
        flags.append((hyperscan.HS_FLAG_CASELESS if p.caseless else 0) | hyperscan.HS_FLAG_MULTILINE
                     | (hyperscan.HS_FLAG_SINGLEMATCH if p.single else 0))
    ids = [p.index for p in group]
    cache = _cache_path(exprs, flags, ids)
    if cache is not None and cache.is_file():
        try:
            db = hyperscan.loadb(cache.read_bytes(), mode=hyperscan.HS_MODE_BLOCK)
            db.scratch = hyperscan.Scratch(db)
            return db
        except Exception:  # a stale or damaged cache is rebuilt below
            pass
    db, done = _compile(hyperscan, exprs, flags, ids)
    prefiltered += done
    if db is not None and cache is not None:
        _write_bytes(cache, hyperscan.dumpb(db))
    return db


TAIL_LITERAL = 4  # characters every match of a cut-down expression must still contain
LITERALS_FROM = 16  # characters: a pattern whose every required literal is this long is looked for by its literals


def hyperscan_expression(p: Pattern) -> str:
    """What hyperscan looks for on behalf of one pattern: a superset of its lines, which Python verifies anyway.

    A regex whose required literals are long but which starts with classes and repeats (a progress bar before
    "Traceback (most recent call last)") makes hyperscan run an automaton ahead of the literal at every position;
    the literals alone find the same lines plus a rare few that fail verification. Measured with literals of 16
    characters or more (124 of 196 patterns): hyperscan time per MB on 1 MB NCCL rank logs 0.53 -> 0.43 ms, on step
    lines 3.0 -> 2.6, on the mix 1.7 -> 1.5. Context (single-match) patterns keep their regex: hyperscan reports
    only their first match in a block, which must be a real one."""
    regex = prefilter_regex(p.regex)
    if p.single:
        return regex
    if not p.literals or min(map(len, p.literals)) < LITERALS_FROM:
        return _after_any_run(regex) or regex
    if p.caseless and not all(lit.isascii() for lit in p.literals):
        return regex  # hyperscan folds the case of ASCII letters only
    return "|".join(re.escape(lit) for lit in sorted(p.literals))


def _after_any_run(regex: str) -> str | None:
    """What follows the last top-level `.*` (or `.+`) of a regex with no top-level alternation: on the same line
    (`.` stops at a newline), a superset of its matches. A run of classes before it (`\\s*\\d+\\??: +\\S.*\\bpmtu`) makes
    hyperscan try the head at every digit of every line; measured on 1 MB NCCL rank logs, tracepath's hop pattern
    alone cost a tenth of the whole database's time, and nothing once cut to `\\bpmtu ...`."""
    from gpudoctor.engine.covers import top_level

    cut = None
    for k, c in top_level(regex):
        if c == "|":
            return None
        if c == "." and regex[k + 1 : k + 2] in ("*", "+"):
            cut = k + 2 + (regex[k + 2 : k + 3] in ("?", "+"))
    if cut is None or cut >= len(regex):
        return None
    from gpudoctor.kb.literals import required_literals

    flags = re.match(r"\(\?[a-zA-Z]+\)", regex)
    tail = (flags.group(0) if flags else "") + regex[cut:]
    try:
        needed = required_literals(tail)
    except re.error:
        return None
    # the tail alone must still be rare: a literal of TAIL_LITERAL characters in every match
    return tail if needed and min(map(len, needed)) >= TAIL_LITERAL else None


def prefiltered(patterns: PatternSet) -> list[int]:
    """Patterns hyperscan could take only in prefilter mode (a superset Python verifies), after a fresh compile."""
    return list(patterns.engines.get("hyperscan-prefiltered", []))


def _compile(hyperscan, exprs, flags, ids):
    """Exact matching where hyperscan can take an expression as written; prefilter mode only for the few it cannot."""
    def build(all_flags):
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=all_flags)
        return db

    try:
        return build(flags), []
    except Exception:
        pass
    mixed = list(flags)
    for k, (expr, flag) in enumerate(zip(exprs, flags)):
        try:
            hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK).compile(expressions=[expr], ids=[0], elements=1,
                                                                      flags=[flag])
        except Exception:
            mixed[k] = flag | hyperscan.HS_FLAG_PREFILTER
    done = [ids[k] for k in range(len(ids)) if mixed[k] != flags[k]]
    try:
        return build(mixed), done
    except Exception:
        return None, done


def _cache_path(exprs: list[bytes], flags: list[int], ids: list[int]):
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
        _prune(path.parent)
    except OSError:
        pass  # no cache, just a slower start next time


KEEP_DBS = 8  # compiled databases kept: those of the last few catalogues (each upgrade or runbook edit makes new ones)


def _prune(root) -> None:
    """Remove all but the KEEP_DBS newest databases: without this, every catalogue ever used leaves one behind."""
    dbs = []
    for path in root.glob("hyperscan-*.db"):
        try:
            dbs.append((path.stat().st_mtime_ns, path))
        except OSError:  # removed meanwhile by another run
            continue
    for _, path in sorted(dbs, reverse=True)[KEEP_DBS:]:
        try:
            path.unlink()
        except OSError:
            pass
