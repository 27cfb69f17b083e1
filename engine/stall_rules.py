"""Horovod's stall report, read for who submitted the stalled tensor: rank 0 alone is a rank-0-only collective (D21).

Horovod's stall inspector (horovod/common/stall_inspector.cc, CheckForStalledTensors) warns when a tensor was
submitted by some ranks and is still awaited from the others. It names the ranks that did not submit it, in one of
two layouts:

- 0.20 and later: a "Missing ranks:" (earlier "Stalled ranks:") line, then one line per rank that is missing
  something, `<rank>[!]: [<tensor>, <tensor> ...]`, each list cut after six names with " ...";
- 0.19 and before (operations.cc): a "Stalled ops:" line, then one line per tensor,
  `<tensor> [missing ranks: 1, 2, 3]` (or `[ready ranks: 0]`).

When the ranks missing a tensor are exactly 1..k, every rank but 0, and rank 0 itself is not missing it, rank 0 is the
only rank that reached that collective: the collective sits in code only rank 0 runs (`if rank == 0:` around a save,
an evaluation or a metric average), and the others never call it. A tensor missing from some other subset of ranks
says a rank lags or took another path (D19, D9, MN6), which this rule leaves to the signatures.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict

# a report's first line ends with one of these: "Missing ranks:" (0.20+, "Stalled ranks:" in between) or
# "Stalled ops:" (0.19 and before); str.find over a whole log runs far ahead of a regex
_HEADERS = ("Missing ranks:", "Stalled ranks:", "Stalled ops:")
_PER_RANK = _lazy(r"(?:^|[\s>:\]])(\d{1,6})!?: \[(.*)\]\s*$")
_PER_TENSOR = _lazy(r"^\s*(\S.*?) \[(missing|ready) ranks: ([\d,\s]+)\],?\s*$")
MAX_ROWS = 4096  # rows of one report read
MAX_REPORTS = 64  # reports read per log (the inspector repeats its report every minute of a stall)
# in a job of two ranks, rank 1 alone missing a tensor is as often a rank that ran out of batches first (D9): at least
# two other ranks must all be missing it
MIN_OTHERS = 2
# a gradient's allreduce is the training step itself, which every rank runs; ranks that lag there ran out of data (D9)
_GRADIENT = _lazy(r"grad|Distributed\w*Optimizer")


def rank_zero_alone_rule(text: str, file: str) -> list[Verdict]:
    """D21 when a Horovod stall report shows a tensor that rank 0 submitted and every other rank is missing."""
    for start, old in sorted(_header_ends(text))[:MAX_REPORTS]:  # only the rows under a report's first line are split
        first = text.rfind("\n", 0, start) + 1
        rows = text[first: _rows_end(text, start)].splitlines()
        found = _old_layout(rows) if old else _new_layout(rows)
        if found is not None:
            row, tensor, last = found
            at = text.count("\n", 0, first)  # the header's line index
            why = (f"only rank 0 submitted {tensor[:80]}: ranks 1 to {last} are missing it" if last
                   else f"only rank 0 submitted {tensor[:80]}: the report names rank 0 alone as ready")
            return [Verdict("D21", "rule:stall-rank-zero-alone", (
                Evidence(file, at + 1, rows[0], "rule:stall-rank-zero-alone"),
                Evidence(file, at + row + 1, why, "because")), score=0.8)]
    return []


def _header_ends(text: str):
    """(offset just past the header, whether it is the old layout) for each header that ends its line."""
    for header in _HEADERS:
        at = text.find(header)
        while at >= 0:
            end = at + len(header)
            nl = text.find("\n", end)
            if not text[end: len(text) if nl < 0 else nl].strip():
                yield end, header == "Stalled ops:"
            at = text.find(header, end)


def _rows_end(text: str, start: int) -> int:
    """Where the MAX_ROWS lines after the header line that start is on end."""
    end = text.find("\n", start)
    if end < 0:
        return len(text)
    for _ in range(MAX_ROWS):
        end = text.find("\n", end + 1)
        if end < 0:
            return len(text)
    return end


def _new_layout(lines: list[str]) -> tuple[int, str, int] | None:
    """(row, tensor, highest rank) for a tensor every listed rank but 0 is missing, from the `<rank>: [...]` rows
    under the header line (lines[0]; _rows_end already bounds them)."""
    lists: dict[int, tuple[int, list[str], bool]] = {}
    for j in range(1, len(lines)):
        m = _PER_RANK.search(lines[j])
        if m is None:
            break
        names = m.group(2).strip()
        cut = names.endswith("...")
        names = names[:-3] if cut else names
        lists[int(m.group(1))] = (j, [n.strip() for n in names.split(",") if n.strip()], cut)
    others = sorted(r for r in lists if r != 0)
    if len(others) < MIN_OTHERS or others != list(range(1, len(others) + 1)):
        return None  # the missing ranks are not every rank from 1 up: some rank besides 0 did submit
    zero = lists.get(0)
    if zero is not None and zero[2]:
        return None  # rank 0's own list was cut: a name not in it may still be missing there
    for tensor in lists[1][1]:
        if _GRADIENT.search(tensor):
            continue
        if all(tensor in lists[r][1] for r in others) and (zero is None or tensor not in zero[1]):
            return lists[1][0], tensor, others[-1]
    return None


def _old_layout(lines: list[str]) -> tuple[int, str, int] | None:
    """(row, tensor, highest rank) for a `<tensor> [missing ranks: 1, ..., k]` or `[ready ranks: 0]` row under the
    header line (lines[0])."""
    for j in range(1, len(lines)):
        if not lines[j].strip():
            continue
        m = _PER_TENSOR.search(lines[j])
        if m is None:
            break
        ranks = [int(r) for r in m.group(3).replace(" ", "").split(",") if r]
        if _GRADIENT.search(m.group(1)):
            continue
        if m.group(2) == "ready" and ranks == [0]:
            return j, m.group(1), 0
        if m.group(2) == "missing" and len(ranks) >= MIN_OTHERS and ranks == list(range(1, len(ranks) + 1)):
            return j, m.group(1), ranks[-1]
    return None
