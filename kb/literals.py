"""Find the literal strings a regular expression cannot match without: the prefilter in front of the regexes."""
from __future__ import annotations

try:  # Python 3.11+ moved the parser; the old name still works on 3.10
    from re import _parser as sre_parse  # type: ignore[attr-defined]
    from re import _constants as sre_c  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

MIN_LITERAL = 3

# A "need" is a set of alternatives: at least one of these strings occurs in every match.
Need = frozenset


def _best(needs: list[frozenset[str]]) -> frozenset[str] | None:
    """Of several needs that must all hold, the most selective: fewest, longest alternatives."""
    good = [n for n in needs if n and all(len(s) >= MIN_LITERAL for s in n)]
    if not good:
        return None
    return max(good, key=lambda n: (min(len(s) for s in n), -len(n)))


def _seq_needs(items, caseless: bool) -> list[frozenset[str]]:
    """Needs of a sequence: runs of plain characters, plus needs of required sub-groups."""
    needs: list[frozenset[str]] = []
    run: list[str] = []

    def flush():
        if run:
            needs.append(frozenset({"".join(run)}))
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
            sub = _best(_seq_needs(arg[-1], caseless))
            if sub:
                needs.append(sub)
            # a group's literals also glue onto neighbours, but keeping them apart is safe
        elif op is sre_c.BRANCH:
            alts: set[str] = set()
            for branch in arg[1]:
                need = _best(_seq_needs(branch, caseless))
                if need is None:
                    alts = set()
                    break
                alts |= need
            if alts:
                needs.append(frozenset(alts))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            lo, _hi, sub = arg
            if lo >= 1:
                need = _best(_seq_needs(sub, caseless))
                if need:
                    needs.append(need)
        # AT (anchors), ANY, IN (classes), etc. require no literal
    flush()
    return needs


def required_literals(regex: str, caseless: bool = False) -> frozenset[str] | None:
    """Strings one of which every match contains (lower-cased when caseless), or None if there is none."""
    parsed = sre_parse.parse(regex)
    caseless = caseless or bool(parsed.state.flags & sre_c.SRE_FLAG_IGNORECASE)
    need = _best(_seq_needs(list(parsed), caseless))
    if need is None:
        return None
    return frozenset(s.lower() for s in need) if caseless else need
