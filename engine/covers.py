"""Literal prefilters of one regex: the cheapest set of strings one of which each match must contain."""
from __future__ import annotations

import re
from typing import Callable

try:  # Python 3.11+ moved the parser; the old name still works on 3.10
    from re import _constants as sre_c  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

__all__ = ["Need", "branches", "cheapest", "need"]

MIN_LEN = 3  # shorter strings are on every line: no filter

# What a match needs, as a tree: ("lit", s) the string s; ("all", parts) every part (so any one part's
# strings are a prefilter); ("any", parts) one of the parts (so every part must give strings).
Need = tuple


def _seq(items) -> Need:
    parts: list[Need] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            parts.append(("lit", "".join(run)))
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
            parts.append(_seq(arg[-1]))
        elif op is sre_c.BRANCH:
            parts.append(("any", [_seq(b) for b in arg[1]]))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and arg[0] >= 1:
            parts.append(_seq(arg[2]))
    flush()
    return ("all", parts)


def _lower(node: Need) -> Need:
    if node[0] == "lit":
        return ("lit", node[1].lower())
    return (node[0], [_lower(n) for n in node[1]])


def need(regex: str, caseless: bool = False) -> Need | None:
    """The tree of strings a match of `regex` needs (lower-cased when caseless); None if it does not parse."""
    try:
        parsed = sre_parse.parse(regex)
    except Exception:
        return None
    tree = _seq(list(parsed))
    return _lower(tree) if caseless or parsed.state.flags & sre_c.SRE_FLAG_IGNORECASE else tree


def cheapest(node: Need, cost: Callable[[str], int], limit: float = float("inf")) -> tuple[int, frozenset[str]] | None:
    """The strings, one of which every match contains, whose costs add up least (each string's cost is,
    say, how often it occurs in the text to scan), or None when every choice costs `limit` or more.
    Exact, not a guess among a few: the cost of "any" is the sum of its parts', of "all" the least part's."""
    kind = node[0]
    if kind == "lit":
        if len(node[1]) < MIN_LEN:
            return None
        c = cost(node[1])
        return (c, frozenset((node[1],))) if c < limit else None
    if kind == "all":
        best = None
        for part in node[1]:
            found = cheapest(part, cost, limit if best is None else best[0])
            if found is not None:
                best = found
        return best
    total, strings = 0, set()
    for part in node[1]:
        found = cheapest(part, cost, limit - total)
        if found is None:
            return None
        total += found[0]
        strings |= found[1]
    return total, frozenset(strings)


def branches(regex: str) -> tuple[str, list[str]]:
    """(the regex's leading global flags such as "(?i)", its top-level alternatives without them);
    one alternative where it has none or cannot be split (a backreference ties them together)."""
    flags = ""
    if re.search(r"\\[1-9]|\(\?P=|\(\?\(", regex):  # a group referred to by number or name: keep them together
        return "", [regex]
    if regex.startswith("(?") and not regex.startswith(("(?:", "(?P", "(?=", "(?!", "(?<", "(?#", "(?(")):
        close = regex.find(")")
        if close < 0 or ":" in regex[:close]:
            return "", [regex]
        flags, regex = regex[: close + 1], regex[close + 1 :]
    parts, start = [], 0
    balanced = [True]
    for k, c in top_level(regex, balanced):
        if c == "|":
            parts.append(regex[start:k])
            start = k + 1
    parts.append(regex[start:])
    return (flags, parts) if balanced[0] else (flags, [regex])


def top_level(regex: str, balanced: list[bool] | None = None):
    """(position, character) of each character of a regex outside every group and character class, escapes
    skipped; balanced[0] is set False where the groups or a class are left open."""
    depth, k, in_class = 0, 0, False
    while k < len(regex):
        c = regex[k]
        if c == "\\":
            k += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            k += 1
            k += regex[k : k + 1] == "^"
            k += regex[k : k + 1] == "]"  # a ] first in a class is a literal
            continue
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            yield k, c
        k += 1
    if balanced is not None:
        balanced[0] = depth == 0 and not in_class
