"""Every way of prefiltering one regex by literals: sets of strings one of which each match contains."""
from __future__ import annotations

import itertools

try:  # Python 3.11+ moved the parser; the old name still works on 3.10
    from re import _constants as sre_c  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

__all__ = ["covers"]

MIN_LEN = 3
_MAX_COVERS = 24

Cover = frozenset  # of str


def _ok(cover: Cover) -> bool:
    return bool(cover) and all(len(s) >= MIN_LEN for s in cover)


def _seq(items) -> list[Cover]:
    """Covers of a sequence: any one required part's cover covers the whole."""
    found: list[Cover] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            found.append(frozenset({"".join(run)}))
            run.clear()

    for op, arg in items:
        if op is sre_c.LITERAL:
            run.append(chr(arg))
            continue
        if op is sre_c.IN and len(arg) == 1 and arg[0][0] is sre_c.LITERAL:
            run.append(chr(arg[0][1]))
            continue
        flush()
        if op is sre_c.SUBPATTERN:
            found += _seq(arg[-1])
        elif op is sre_c.BRANCH:
            found += _branch(arg[1])
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and arg[0] >= 1:
            found += _seq(arg[2])
    flush()
    return [c for c in found if _ok(c)]


def _branch(branches) -> list[Cover]:
    """Covers of an alternation: one cover from every branch, joined; a few of the best combinations."""
    per: list[list[Cover]] = []
    for branch in branches:
        options = sorted(set(_seq(branch)), key=lambda c: (-min(map(len, c)), len(c), sorted(c)))
        if not options:
            return []
        per.append(options)
    keep = 1
    while keep < 4 and (keep + 1) ** len(per) <= _MAX_COVERS:
        keep += 1
    combos = itertools.islice(itertools.product(*(o[:keep] for o in per)), _MAX_COVERS)
    out = [frozenset().union(*combo) for combo in combos]
    # also each branch's own alternatives with the others' best, so that one rare word can be chosen
    for k, options in enumerate(per):
        for option in options[1:4]:
            out.append(frozenset().union(*(option if j == k else per[j][0] for j in range(len(per)))))
    return list(dict.fromkeys(out))


def covers(regex: str, caseless: bool = False) -> list[Cover]:
    """Sets of strings, one of which every match of `regex` contains (lower-cased when caseless);
    several when the regex allows several choices. Empty when no literal prefilter exists."""
    try:
        parsed = sre_parse.parse(regex)
    except Exception:
        return []
    caseless = caseless or bool(parsed.state.flags & sre_c.SRE_FLAG_IGNORECASE)
    found = list(dict.fromkeys(_seq(list(parsed))))
    if caseless:
        found = list(dict.fromkeys(frozenset(s.lower() for s in c) for c in found))
    return found[: _MAX_COVERS * 2]
