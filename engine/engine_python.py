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
    regex = patterns.regex(p.index)
    for pos in offsets:
        start = block.rfind(b"\n", 0, pos) + 1
        nl = block.find(b"\n", pos, end)
        nl = end if nl < 0 else nl
        lo = start if nl - start <= MAX_TEXT * 2 else max(start, pos - MAX_TEXT)
        if regex.search(_decode(block[lo:min(nl, lo + MAX_TEXT * 2)])):
            return start, pos
    return None


class PythonMatcher:
    name = "python"

    def __init__(self, patterns: PatternSet, indexes=None):
        self.patterns = patterns
        self._exact, self._folded, self._bare, self._singles = patterns.literal_table(indexes)
        self._covers: dict[int, list] = {}  # pattern index -> its literal covers, worked out when first needed

    def _rarest_cover(self, index: int, haystack, start: int, end: int):
        """Of the pattern's literal covers, the one with the fewest occurrences in haystack[start:end]
        (a literal on every line is no filter; another word the regex needs may be rare), or None."""
        if index not in self._covers:
            from gpudoctor.engine.covers import covers

            p = self.patterns.patterns[index]
            self._covers[index] = [[s.encode("utf-8") for s in c] for c in covers(p.regex, p.caseless)]
        best, best_count = None, COMMON_LITERAL * 4
        counted: dict[bytes, int] = {}
        for cover in self._covers[index]:
            total = 0
            for needle in cover:
                if needle not in counted:
                    counted[needle] = haystack.count(needle, start, end)
                total += counted[needle]
                if total >= best_count:
                    break
            if total < best_count:
                best, best_count = cover, total
        return best

    def _lines_with(self, needles, haystack, start: int, end: int, index: int, add) -> None:
        for needle in needles:
            pos = haystack.find(needle, start, end)
            while pos >= 0:
                add(haystack.rfind(b"\n", 0, pos) + 1, (index,), pos + len(needle))
                nl = haystack.find(b"\n", pos, end)
                if nl < 0:
                    break
                pos = haystack.find(needle, nl + 1, end)

    def candidates(self, block, end: int):
        found: dict[int, tuple[set[int], int]] = {}

        def add(start: int, indexes, at: int) -> None:
            entry = found.get(start)
            if entry is None:
                found[start] = (set(indexes), at)
            else:
                entry[0].update(indexes)

        for table, haystack in ((self._exact, block), (self._folded, block[:end].lower() if self._folded else b"")):
            for literal, indexes in table:
                needle = literal.encode("utf-8")
                pos = haystack.find(needle, 0, end)
                seen = 0
                while pos >= 0:
                    start = haystack.rfind(b"\n", 0, pos) + 1
                    seen += 1
                    if seen > COMMON_LITERAL:
                        # a literal on every other line ("step", "loss"): another word the pattern needs
                        # may be rare here; failing that, re finds the real matches in the rest of the block
                        for index in indexes:
                            cover = self._rarest_cover(index, haystack, start, end)
                            if cover is not None:
                                self._lines_with(cover, haystack, start, end, index, add)
                                continue
                            for m in self.patterns.bytes_regex(index).finditer(block, start, end):
                                at = m.end()
                                add(block.rfind(b"\n", 0, max(at - 1, 0)) + 1 if at else 0, (index,), at)
                        break
                    add(start, indexes, pos + len(needle))
                    nl = haystack.find(b"\n", pos, end)
                    if nl < 0:
                        break
                    pos = haystack.find(needle, nl + 1, end)
        lowered = None
        for p in self._singles:
            # like hyperscan's single-match mode: the first line of the block that really matches
            if p.caseless and lowered is None:
                lowered = block[:end].lower()
            haystack = lowered if p.caseless else block
            best, best_at = None, 0
            for literal in p.literals:
                needle = literal.encode("utf-8")
                limit = end if best is None else best

                def occurrences(needle=needle, limit=limit):
                    pos = haystack.find(needle, 0, limit)
                    while pos >= 0:
                        yield pos
                        nl = block.find(b"\n", pos, end)
                        if nl < 0:
                            return
                        pos = haystack.find(needle, nl + 1, limit)

                first = first_matching_line(self.patterns, p, block, end, occurrences())
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
        return found
