"""Where many literals occur in a block, found in a few passes: each literal is searched by a short
string it contains (its anchor), which it shares with others, and checked only where that anchor occurs."""
from __future__ import annotations

from typing import Iterable

ANCHOR_LEN = 4  # bytes of a gram an anchor starts from
GROUP = 3  # literals that must share an anchor for its pass to save any
# grams common in English, so in most logs: never anchors
_COMMON = frozenset({b"tion", b"ment", b"ther", b"that", b"with", b"have", b"ance", b"ence", b"ting", b"atio",
                     b"ress", b"ster", b"ight", b"able", b"ally", b"ould", b"here", b"ions", b"inte", b"rati",
                     b"ctio", b"ing ", b"the ", b" the", b"and ", b" and", b"for ", b" for", b" to ", b" of "})


def _rarity(gram: bytes) -> tuple:
    """Higher for grams less likely in ordinary log text: capitals, digits, punctuation; no spaces."""
    return (gram not in _COMMON, b" " not in gram, sum(not (97 <= c <= 122) for c in gram), gram)


def _widen(gram: bytes, literals: list[bytes]) -> bytes:
    """The longest string around gram's first place in each literal that all of them share."""
    at = [lit.find(gram) for lit in literals]
    lo, hi = 0, len(gram)
    while all(k + lo > 0 for k in at) and len({lit[k + lo - 1] for lit, k in zip(literals, at)}) == 1:
        lo -= 1
    while all(k + hi < len(lit) for lit, k in zip(literals, at)) and len({lit[k + hi] for lit, k in zip(literals, at)}) == 1:
        hi += 1
    return literals[0][at[0] + lo : at[0] + hi]


class Anchors:
    """A plan of anchors for a set of literals (bytes), re-planned when an anchor proves common."""

    def __init__(self, literals: Iterable[bytes]):
        self.literals = sorted(set(literals))
        self.banned: set[bytes] = set()  # grams seen too often to be worth following, for this input
        self.groups: dict[bytes, list[tuple[bytes, int]]] = {}  # anchor -> (literal, offset of the anchor in it)
        self._plan()

    def _grams(self, literal: bytes) -> list[bytes]:
        grams = {literal[k : k + ANCHOR_LEN] for k in range(len(literal) - ANCHOR_LEN + 1)}
        return [g for g in grams if g not in self.banned]

    def _plan(self) -> None:
        """Greedy cover: the gram that most literals share first, while at least GROUP of them share it,
        widened to all they have in common there (a longer needle is searched faster); the other
        literals are searched directly, by themselves (a long needle costs less than a short anchor)."""
        members: dict[bytes, set[bytes]] = {}
        for lit in self.literals:
            for gram in self._grams(lit):
                members.setdefault(gram, set()).add(lit)
        members = {g: m for g, m in members.items() if len(m) >= GROUP and g not in _COMMON}
        groups: dict[bytes, list[tuple[bytes, int]]] = {}
        while members:
            gram = max(members, key=lambda g: (len(members[g]), _rarity(g)))
            taken = sorted(members.pop(gram))
            anchor = _widen(gram, taken)
            groups.setdefault(anchor, []).extend((lit, lit.find(anchor)) for lit in taken)
            for g in list(members):
                members[g].difference_update(taken)
                if len(members[g]) < GROUP:
                    del members[g]
        self.groups = groups

    def sweep(self, haystack, end: int, budget: int) -> dict[bytes, list[int]]:
        """literal -> every offset where it starts in haystack[:end] (wholly inside it), ascending, for the
        literals whose anchor occurs at most `budget` times; the others are for the caller to search."""
        found: dict[bytes, list[int]] = {}
        common = []
        find = haystack.find
        for anchor, members in self.groups.items():
            seen: list[int] = []
            pos = find(anchor, 0, end)
            while pos >= 0:
                seen.append(pos)
                if len(seen) > budget:
                    break
                pos = find(anchor, pos + 1, end)
            if len(seen) > budget:
                common.append(anchor)
                continue
            startswith = haystack.startswith
            for lit, k in members:
                if lit == anchor:
                    found[lit] = seen
                    continue
                last = end - len(lit)
                found[lit] = [p - k for p in seen if k <= p and p - k <= last and startswith(lit, p - k)]
        if common:  # follow those literals by other anchors from the next block on
            # every gram of a common anchor is at least as common
            self.banned.update(a[k : k + ANCHOR_LEN] for a in common for k in range(len(a) - ANCHOR_LEN + 1))
            self._plan()
        return found
