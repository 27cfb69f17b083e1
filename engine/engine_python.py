"""The pure-Python engine: a literal prefilter in front of `re`, for platforms with no compiled engine."""
from __future__ import annotations

from gpudoctor.engine.patterns import Pattern, PatternSet

COMMON_LITERAL = 256  # past this many lines with a literal in one block, hand the rest of the block to re
MAX_TEXT = 4096


def _decode(raw) -> str:
    return raw.decode("utf-8", "replace")


def first_matching_line(patterns: PatternSet, p: Pattern, block, end: int, offsets) -> tuple[int, int] | None:
    """Of the given match offsets, (line start, offset) of the first line that p's Python regex really
    matches (what hyperscan's single-match mode reports for a context pattern)."""
    from gpudoctor.engine.prefix import parse_prefix

    regex = patterns.regex(p.index)
    anchored = p.index in patterns.anchored  # as the scan verifies it: also on the line without its prefixes
    if anchored:
        loose = patterns.loose_regex(p.index)
    for pos in offsets:
        start = block.rfind(b"\n", 0, pos) + 1
        nl = block.find(b"\n", pos, end)
        nl = end if nl < 0 else nl
        lo = start if nl - start <= MAX_TEXT * 2 else max(start, pos - MAX_TEXT)
        text = _decode(block[lo:min(nl, lo + MAX_TEXT * 2)])
        if regex.search(text):
            return start, pos
        # the ^-less regex rules most lines out before their prefixes are read
        if anchored and loose.search(text) and regex.search(parse_prefix(text.rstrip("\r")).body):
            return start, pos
    return None


def match_end(data, m) -> int:
    """Where a block regex's match really ends: a match that ends in white space (a trailing \\s*$ runs on past
    blank lines to where $ holds) belongs to the line of its last other character, not to a blank line after."""
    at, begin = m.end(), m.start()
    while at > begin and data[at - 1] in _BLANK:
        at -= 1
    return at


_BLANK = frozenset(b" \t\r\n\x0b\x0c")


SHAPES_FROM = 1 << 12  # blocks of this many bytes or more are first read for their line shapes
ANCHOR_FROM = 1 << 18  # varied blocks of this many bytes or more search literals by their anchors
SHAPES_RETRY = 4  # after a block too varied for shapes, this many blocks go without them
ANCHOR_BUDGET = 9  # an anchor seen more than once per 2**9 bytes costs more than searching its literals


def _per_line(haystack, needle: bytes, needle_end: int, line_end: int, known: list[int] | None):
    """Offsets of needle's first occurrence on each line of haystack (wholly before needle_end): from
    `known` (every offset, ascending) where the anchors found them, else by searching."""
    if known is None:
        pos = haystack.find(needle, 0, needle_end)
        while pos >= 0:
            yield pos
            nl = haystack.find(b"\n", pos, line_end)
            if nl < 0:
                return
            pos = haystack.find(needle, nl + 1, needle_end)
        return
    next_line, last = 0, needle_end - len(needle)
    for pos in known:
        if pos > last:
            return
        if pos < next_line:
            continue
        yield pos
        nl = haystack.find(b"\n", pos, line_end)
        if nl < 0:
            return
        next_line = nl + 1


class PythonMatcher:
    name = "python"

    def __init__(self, patterns: PatternSet, indexes=None):
        self.patterns = patterns
        self._exact, self._folded, self._bare, self._singles = patterns.literal_table(indexes)
        self._needs: dict[int, tuple] = {}  # pattern index -> (flags, [(alternative, its need tree)], caseless)
        self._rx: dict[tuple, tuple] = {}  # (index, alternatives, over the lowered block) -> (regex, lowered)
        self._anchors = None  # [case-sensitive, caseless] Anchors, planned for the first big varied block
        self._shapes = None  # the current block's Shapes, where it has few
        self._folded_literals = [lit.encode("utf-8") for lit, _ in self._folded] + [
            lit.encode("utf-8") for p in self._singles if p.caseless for lit in p.literals]
        self._shapes_off = 0  # blocks still to go without shapes, after one whose lines were too varied

    def _needs_of(self, index: int) -> tuple:
        if index not in self._needs:
            from gpudoctor.engine.covers import branches, need
            from gpudoctor.engine.patterns import prefilter_regex

            p = self.patterns.patterns[index]
            flags, parts = branches(prefilter_regex(p.regex))
            caseless = p.caseless or "i" in flags
            self._needs[index] = (flags, [(part, need(flags + part, p.caseless)) for part in parts], caseless)
        return self._needs[index]

    def _plan_common(self, index: int, haystack, lowered: bool, start: int, end: int):
        """For a pattern whose literal is on nearly every line of haystack[start:end]: (strings to look for,
        alternatives left to re). Each top-level alternative by itself: the strings it needs that occur
        least here (another word may be rare: "nan" beside "loss"), or, where all are common, re."""
        from gpudoctor.engine.covers import cheapest

        _flags, parts, caseless = self._needs_of(index)
        counted: dict[str, int] = {}

        def cost(text: str) -> int:
            if text not in counted:
                needle = text.encode("utf-8")
                absent = self._shapes is not None and not self._shapes.may_hold(needle, lowered)
                counted[text] = 0 if absent else haystack.count(needle, start, end)
            return counted[text]

        limit = max(COMMON_LITERAL * 4, (end - start) >> 10)  # past this many lines re is the quicker
        strings: set[str] = set()
        slow: list[int] = []
        for k, (_part, tree) in enumerate(parts):
            found = cheapest(tree, cost, limit) if tree is not None and caseless == lowered else None
            if found is None:
                slow.append(k)
            else:
                strings |= found[1]
        return sorted(s.encode("utf-8") for s in strings), tuple(slow)

    def _slow_regex(self, index: int, slow: tuple, lowered: bool):
        """(bytes regex of the pattern's alternatives `slow` over whole blocks, whether it reads the
        lower-cased block: re is about twice as fast without IGNORECASE where lower-casing is safe)."""
        key = (index, slow, lowered)
        if key not in self._rx:
            import re

            flags, parts, _caseless = self._needs_of(index)
            # a leading \b keeps re from skipping ahead to the alternative's first letters; without it
            # the regex matches more, which is all a prefilter may do (the scan verifies each line)
            body = "|".join(parts[k][0].removeprefix("\\b") for k in slow)
            p = self.patterns.patterns[index]
            safe = lowered and p.caseless and flags in ("", "(?i)") and not re.search(r"\\[A-Z]|\(\?[a-zA-Z]", body)
            if safe:
                self._rx[key] = re.compile(body.lower().encode("utf-8"), re.MULTILINE), True
            else:
                rx_flags = re.MULTILINE | (re.IGNORECASE if p.caseless else 0)
                self._rx[key] = re.compile((flags + body).encode("utf-8"), rx_flags), False
        return self._rx[key]

    def _common(self, index: int, block, haystack, start: int, end: int, add) -> None:
        lowered = haystack is not block
        strings, slow = self._plan_common(index, haystack, lowered, start, end)
        self._lines_with(strings, haystack, start, end, index, add)
        if slow:
            rx, over_lowered = self._slow_regex(index, slow, lowered)
            data = haystack if over_lowered else block
            for m in rx.finditer(data, start, end):
                at = match_end(data, m)
                add(block.rfind(b"\n", 0, max(at - 1, 0)) + 1 if at else 0, (index,), at)

    def _lines_with(self, needles, haystack, start: int, end: int, index: int, add) -> None:
        for needle in needles:
            pos = haystack.find(needle, start, end)
            while pos >= 0:
                add(haystack.rfind(b"\n", 0, pos) + 1, (index,), pos + len(needle))
                nl = haystack.find(b"\n", pos, end)
                if nl < 0:
                    break
                pos = haystack.find(needle, nl + 1, end)

    def _plan_anchors(self) -> list:
        from gpudoctor.engine.anchors import Anchors

        return [Anchors([lit.encode("utf-8") for lit, _ in table]
                        + [lit.encode("utf-8") for p in self._singles if p.caseless == folded for lit in p.literals])
                for table, folded in ((self._exact, False), (self._folded, True))]

    def candidates(self, block, end: int):
        found: dict[int, tuple[set[int], int]] = {}

        def add(start: int, indexes, at: int) -> None:
            entry = found.get(start)
            if entry is None:
                found[start] = (set(indexes), at)
            else:
                entry[0].update(indexes)

        located: list[dict[bytes, list[int]]] = [{}, {}]  # literal -> every offset, where anchors found them
        self._shapes = shapes = None
        if end >= SHAPES_FROM:  # a tiny block: a pass per literal costs less
            if self._shapes_off:
                self._shapes_off -= 1
            else:
                from gpudoctor.engine.shapes import Shapes

                self._shapes = shapes = Shapes.of(block, end)
                self._shapes_off = SHAPES_RETRY if shapes is None else 0
        caseless_here = self._folded_literals
        if shapes is not None:
            caseless_here = [lit for lit in caseless_here if shapes.may_hold(lit, True)]
        lowered = block[:end].lower() if caseless_here else b""  # none here: no lower-cased copy
        if shapes is None and end >= ANCHOR_FROM:
            if self._anchors is None:
                self._anchors = self._plan_anchors()
            budget = max(COMMON_LITERAL, end >> ANCHOR_BUDGET)
            located = [self._anchors[0].sweep(block, end, budget),
                       self._anchors[1].sweep(lowered, end, budget) if lowered else {}]
        common: dict[int, int] = {}  # pattern -> offset from which all its matches are candidates
        for table, haystack, folded in ((self._exact, block, False), (self._folded, lowered, True)):
            known = located[folded]
            for literal, indexes in table:
                needle = literal.encode("utf-8")
                if shapes is not None and not shapes.may_hold(needle, folded):
                    continue
                seen = 0
                for pos in _per_line(haystack, needle, end, end, known.get(needle)):
                    start = haystack.rfind(b"\n", 0, pos) + 1
                    seen += 1
                    if seen > COMMON_LITERAL:
                        # a literal on every other line ("step", "loss"): see _plan_common
                        for index in indexes:
                            # another of its literals may have handed it over already, from `since`
                            since = common.get(index, end)
                            if start < since:
                                self._common(index, block, haystack, start, since, add)
                                common[index] = start
                        break
                    add(start, indexes, pos + len(needle))
        for p in self._singles:
            # like hyperscan's single-match mode: the first line of the block that really matches
            haystack = lowered if p.caseless else block
            known = located[p.caseless]
            best, best_at = None, 0
            for literal in p.literals:
                needle = literal.encode("utf-8")
                if shapes is not None and not shapes.may_hold(needle, p.caseless):
                    continue
                limit = end if best is None else best
                occurrences = _per_line(haystack, needle, limit, end, known.get(needle))
                first = first_matching_line(self.patterns, p, block, end, occurrences)
                if first is not None and (best is None or first[0] < best):
                    best, best_at = first
            if best is not None:
                add(best, (p.index,), best_at)
        if self._bare:  # patterns without a literal (none in the shipped catalogue): every line
            start = 0
            while start < end:
                add(start, self._bare, start)
                nl = block.find(b"\n", start, end)
                start = end if nl < 0 else nl + 1
        self._shapes = None
        return found
