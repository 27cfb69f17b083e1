"""What the ranks' progress bars say: ranks in step with each other that count a different number of batches to their
epoch (D22's length mismatch, which ends in D9's hang at the epoch's end).

tqdm prints a bar as "{n}/{total} [{elapsed}<{remaining}, {rate}]" (tqdm/std.py format_meter, 4.x; Lightning's and
accelerate's bars are tqdm's). Each rank of a job that shows its own bar prints one; ranks that synchronise every step
reach the same step n at the same elapsed time. Two such bars, at the same n and the same elapsed time, whose totals
differ, are two ranks whose loaders have different lengths: the one with the fewest batches leaves the epoch first and
the others wait in a collective it never joins. One process's bar redrawn over several epochs can reach the same n
with another total too, but not after the same elapsed time, so the elapsed time must agree.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict

# a bar's head up to its elapsed time, matched backwards from each "<" (str.find runs at C speed; a regex scan of a
# bar-dense log from every digit does not)
_BAR = _lazy(r"(?<![\d/])(\d{1,9})/(\d{1,9}) \[(?:(\d{1,4}):)?(\d{1,2}):(\d{2})$")
BAR_HEAD = 40  # characters before the "<" that hold "n/total [h:mm:ss"
SAME_TIME_S = 2  # the elapsed times of two bars of ranks in step differ by a redraw at most
SAME_LOOP = 0.1  # totals this close (relative) count the same loop's batches, not a train and an eval loop
SCORE = 0.65


def unequal_lengths_rule(text: str, file: str) -> list[Verdict]:
    """D22 (D9 as the hang it ends in) when bars of ranks in step show different totals."""
    if "/" not in text or "<" not in text:
        return []
    from gpudoctor.engine.textfind import line_at

    bars: dict[int, list[tuple[int, int, int]]] = {}  # n -> (elapsed seconds, total, offset)
    for m in _bars(text):
        n, total = int(m.group(1)), int(m.group(2))
        if n < 1 or total < n:
            continue
        elapsed = int(m.group(3) or 0) * 3600 + int(m.group(4)) * 60 + int(m.group(5))
        bars.setdefault(n, []).append((elapsed, total, m.start()))
    for n, seen in bars.items():
        pair = _in_step_pair(seen)
        if pair is None:
            continue
        (t1, _, at1), (_, _, at2) = pair
        first, second = line_at(text, at1), line_at(text, at2)
        totals = sorted({total for t, total, _ in seen if abs(t - t1) <= SAME_TIME_S})
        why = (f"bars at the same step ({n}) after the same time count {', '.join(map(str, totals[:6]))} "
               "batches to the epoch: ranks in step whose loaders have different lengths")
        evidence = (Evidence(file, first[0], first[1], "rule:ranks-count-different-epochs"),
                    Evidence(file, second[0], second[1], "rule:ranks-count-different-epochs"),
                    Evidence(file, first[0], why, "because"))
        return [Verdict("D22", "rule:ranks-count-different-epochs", evidence, score=SCORE),
                Verdict("D9", "rule:ranks-count-different-epochs", evidence[:2], score=0.45, tier="possible")]
    return []


def _in_step_pair(seen: list[tuple[int, int, int]]):
    """Two bars at one step drawn within SAME_TIME_S of each other whose totals differ but count the same loop, by a
    sweep over the bars sorted by elapsed time (a long log redraws one step once per epoch and rank). The window keeps
    one bar per distinct total, so bars that repeat one total cost nothing more; totals that are not within SAME_LOOP
    of each other are few (nine digits hold about two hundred of them)."""
    seen.sort()
    latest: dict[int, tuple[int, int, int]] = {}  # total -> its latest bar in the window
    count: dict[int, int] = {}  # total -> bars with it in the window
    start = 0
    for bar in seen:
        t, total, _at = bar
        while t - seen[start][0] > SAME_TIME_S:
            gone = seen[start][1]
            count[gone] -= 1
            if not count[gone]:
                del count[gone], latest[gone]
            start += 1
        for other, other_bar in latest.items():
            if other != total and abs(other - total) <= SAME_LOOP * max(other, total):
                return other_bar, bar
        latest[total] = bar
        count[total] = count.get(total, 0) + 1
    return None


def _bars(text: str):
    """Each bar's head, found from the "<" after its elapsed time."""
    search = _BAR.search
    at = text.find("<")
    while at != -1:
        m = search(text, max(0, at - BAR_HEAD), at)
        if m is not None:
            yield m
        at = text.find("<", at + 1)
