"""Refuse a signature regex that Python's backtracking matcher can take exponential time on.

The classic case is an unbounded repeat inside another one, `(a+)+` or `(\\w+\\s?)*`: on a line that almost
matches, the matcher tries every way of splitting the run between the two loops, and one more character doubles
the time. The python engine runs every pattern for small logs, so one such regex in a runbook stalls every
`diagnose`. A nested repeat is kept when each turn of the outer loop must begin (or end) with a character the
inner loops cannot take, the separated-list form `\\S+(?: \\S+)*` or `\\d+(?:, \\d+)*`: there the places where
one turn ends are fixed by the separators, and the matcher has one way to split the run.
"""
from __future__ import annotations

from gpudoctor.kb.literals import sre_c, sre_parse

_REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", sre_c.MAX_REPEAT))
_CATEGORIES = {
    sre_c.CATEGORY_DIGIT: str.isdigit,
    sre_c.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdigit(),
    sre_c.CATEGORY_SPACE: str.isspace,
    sre_c.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
    sre_c.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    sre_c.CATEGORY_NOT_WORD: lambda ch: not (ch.isalnum() or ch == "_"),
}


def _class_takes(members, ch: str) -> bool:
    negate, hit = False, False
    for op, arg in members:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            hit = hit or chr(arg) == ch
        elif op is sre_c.RANGE:
            hit = hit or arg[0] <= ord(ch) <= arg[1]
        elif op is sre_c.CATEGORY:
            hit = hit or _CATEGORIES.get(arg, lambda _c: True)(ch)
        else:  # anything this reader does not model counts as taking the character
            hit = True
    return hit != negate


def _takes(items, ch: str) -> bool:
    """Whether any single-character piece of `items`, at any depth, can match `ch` (an over-estimate)."""
    for op, arg in items:
        if op is sre_c.LITERAL and chr(arg) == ch:
            return True
        if op is sre_c.NOT_LITERAL and chr(arg) != ch:
            return True
        if op is sre_c.ANY and ch != "\n":
            return True
        if op is sre_c.IN and _class_takes(arg, ch):
            return True
        if op is sre_c.SUBPATTERN and _takes(arg[-1], ch):
            return True
        if op is sre_c.BRANCH and any(_takes(b, ch) for b in arg[1]):
            return True
        if op in _REPEATS and _takes(arg[2], ch):
            return True
        if op in (sre_c.GROUPREF, sre_c.GROUPREF_EXISTS):
            return True
    return False


def _flat(items) -> list:
    """A body with its plain groups opened: `(?:, (\\d+))` reads as `, \\d+`."""
    out = []
    for op, arg in items:
        if op is sre_c.SUBPATTERN and len(arg[-1]) and arg[-1][0][0] is not sre_c.BRANCH:
            out.extend(_flat(arg[-1]))
        else:
            out.append((op, arg))
    return out


def _inner_loops(items) -> list:
    """The unbounded repeats inside `items`, at any depth."""
    found = []
    for op, arg in items:
        if op in _REPEATS:
            if arg[1] == sre_c.MAXREPEAT:
                found.append(arg[2])
            found.extend(_inner_loops(arg[2]))
        elif op is sre_c.SUBPATTERN:
            found.extend(_inner_loops(arg[-1]))
        elif op is sre_c.BRANCH:
            for branch in arg[1]:
                found.extend(_inner_loops(branch))
        elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            found.extend(_inner_loops(arg[1]))
    return found


def _edge_chars(flat, end: int) -> set[str] | None:
    """The characters a turn of `flat` must start (end=0) or end (end=-1) with, when every way through says."""
    if not flat:
        return None
    op, arg = flat[end]
    if op is sre_c.LITERAL:
        return {chr(arg)}
    if op is sre_c.BRANCH:
        chars: set[str] = set()
        for branch in arg[1]:
            edge = _edge_chars(_flat(branch), end)
            if edge is None:
                return None
            chars |= edge
        return chars
    return None


def _fenced(body, loops) -> bool:
    """Whether every turn of the outer loop starts or ends with a character none of the inner loops takes."""
    flat = _flat(body)
    for end in (0, -1):
        chars = _edge_chars(flat, end)
        if chars and not any(_takes(loop, ch) for loop in loops for ch in chars):
            return True
    return False


def _risky(items) -> bool:
    for op, arg in items:
        if op in _REPEATS:
            _lo, hi, body = arg
            loops = _inner_loops(body)
            if hi == sre_c.MAXREPEAT and loops and not _fenced(body, loops):
                return True
            if _risky(body):
                return True
        elif op is sre_c.SUBPATTERN and _risky(arg[-1]):
            return True
        elif op is sre_c.BRANCH and any(_risky(b) for b in arg[1]):
            return True
        elif op in (sre_c.ASSERT, sre_c.ASSERT_NOT) and _risky(arg[1]):
            return True
    return False


def nested_repeat(regex: str) -> bool:
    """True when `regex` holds an unbounded repeat inside another with no separator fencing the turns."""
    return _risky(list(sre_parse.parse(regex)))
