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


GATE_LEN = 4  # bytes of a gate
GATE_MIN = 3  # literals a gate must stand for to be worth its own pass
GATE_FROM = 1 << 20  # blocks of this many bytes or more use gates
# grams common in any English text, so present in most logs: no use as gates
_COMMON_GRAMS = frozenset({"tion", "ment", "ther", "that", "with", "have", "ance", "ence", "ting", "atio", "ress",
                           "ster", "ight", "able", "ally", "ould", "here", "ions", "inte", "rati", "ctio"})


def gates(literals: list[str]) -> dict[str, str]:
    """literal -> a short string it contains that it shares with at least GATE_MIN - 1 others.
    Where a gate is absent from a block, so is every literal behind it: one pass instead of several."""
    members: dict[str, set[str]] = {}
    for lit in literals:
        for k in range(len(lit) - GATE_LEN + 1):
            gram = lit[k : k + GATE_LEN]
            if " " not in gram and gram.lower() not in _COMMON_GRAMS:
                members.setdefault(gram, set()).add(lit)
    chosen: dict[str, str] = {}
    while members:
        gate = max(members, key=lambda g: (len(members[g]), g))
        taken = members.pop(gate)
        if len(taken) < GATE_MIN:
            return chosen
        for lit in taken:
            chosen[lit] = gate
        for gram in list(members):
            members[gram] -= taken
            if len(members[gram]) < GATE_MIN:
                del members[gram]
    return chosen


class PythonMatcher:
    name = "python"

    def __init__(self, patterns: PatternSet, indexes=None):
        self.patterns = patterns
        self._exact, self._folded, self._bare, self._singles = patterns.literal_table(indexes)
        self._covers: dict[int, list] = {}  # pattern index -> its literal covers, worked out when first needed
        self._folded_rx: dict[int, object] = {}
        self._gates: list[dict[str, str]] | None = None  # worked out for the first big block (see candidates)

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

    def _folded_regex(self, index: int):
        """A caseless pattern as a case-sensitive regex over the lower-cased block (re is about twice as
        fast without IGNORECASE), or None where lower-casing the pattern could change it (\\S, \\W ...)."""
        if index not in self._folded_rx:
            import re

            from gpudoctor.engine.patterns import prefilter_regex

            text = prefilter_regex(self.patterns.patterns[index].regex).replace("(?i)", "")
            safe = self.patterns.patterns[index].caseless and not re.search(r"\\[A-Z]|\(\?[a-zA-Z]", text)
            self._folded_rx[index] = re.compile(text.lower().encode("utf-8"), re.MULTILINE) if safe else None
        return self._folded_rx[index]

    def _lines_with(self, needles, haystack, start: int, end: int, index: int, add) -> None:
        for needle in needles:
            pos = haystack.find(needle, start, end)
            while pos >= 0:
                add(haystack.rfind(b"\n", 0, pos) + 1, (index,), pos + len(needle))
                nl = haystack.find(b"\n", pos, end)
                if nl < 0:
                    break
                pos = haystack.find(needle, nl + 1, end)

    def _make_gates(self) -> list[dict[str, str]]:
        single = [[lit for p in self._singles if p.caseless == folded for lit in p.literals] for folded in (False, True)]
        return [gates(sorted({lit for lit, _ in table} | set(extra)))
                for table, extra in ((self._exact, single[0]), (self._folded, single[1]))]

    def candidates(self, block, end: int):
        if self._gates is None and end >= GATE_FROM:
            self._gates = self._make_gates()
        found: dict[int, tuple[set[int], int]] = {}

        def add(start: int, indexes, at: int) -> None:
            entry = found.get(start)
            if entry is None:
                found[start] = (set(indexes), at)
            else:
                entry[0].update(indexes)

        lowered = block[:end].lower() if self._folded or any(p.caseless for p in self._singles) else b""
        absent: list[dict[str, bool]] = [{}, {}]

        def skip(literal: str, folded: bool) -> bool:
            """Whether the literal's gate is absent from the block, and so the literal too."""
            if self._gates is None:  # a small block: a pass over it costs less than working out the gates
                return False
            gate = self._gates[folded].get(literal)
            if gate is None:
                return False
            seen = absent[folded]
            if gate not in seen:
                seen[gate] = (lowered if folded else block).find(gate.encode("utf-8"), 0, end) < 0
            return seen[gate]

        for table, haystack, folded in ((self._exact, block, False), (self._folded, lowered, True)):
            for literal, indexes in table:
                if skip(literal, folded):
                    continue
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
                            folded_rx = self._folded_regex(index) if haystack is not block else None
                            rx, hay = (folded_rx, haystack) if folded_rx is not None else (self.patterns.bytes_regex(index), block)
                            for m in rx.finditer(hay, start, end):
                                at = m.end()
                                add(block.rfind(b"\n", 0, max(at - 1, 0)) + 1 if at else 0, (index,), at)
                        break
                    add(start, indexes, pos + len(needle))
                    nl = haystack.find(b"\n", pos, end)
                    if nl < 0:
                        break
                    pos = haystack.find(needle, nl + 1, end)
        for p in self._singles:
            # like hyperscan's single-match mode: the first line of the block that really matches
            haystack = lowered if p.caseless else block
            best, best_at = None, 0
            for literal in p.literals:
                if skip(literal, p.caseless):
                    continue
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
