"""Strip the prefixes that launchers, loggers, NCCL and schedulers put before a log line, keeping what they say."""
from __future__ import annotations

from functools import lru_cache

from gpudoctor.engine.display import line_ending_len, visible_text
from gpudoctor.engine.prefix_rules import OUTER_KINDS, SCORE, STRONG, TS_KINDS, WEAK, Acc, Rule
from gpudoctor.kb.record import record

__all__ = ["LinePrefix", "parse_prefix", "parse_hit_prefix", "MAX_PREFIXES"]


@record(frozen=True)  # no slots: parse_prefix installs __dict__ in one step (see _make)
class LinePrefix:
    """What the prefixes of one log line said, and the text left after them.

    Guarantees (tested on arbitrary text): `body` is a suffix of `visible_text(line)`;
    `offset` is where `body` starts in the original line (`line[offset:offset+len(body)]
    == body`), or None when ANSI codes were cut out and the body is no longer a slice;
    parsing `body` again strips nothing more unless it starts with an srun label
    ("3: ") or a reply's quote marks ("> "), which are only read on the outside of a line.
    """

    body: str
    offset: int | None = None
    rank: int | None = None  # global rank: [rank3]:, Open MPI [1,3]<stderr>:, vLLM (Worker rank=3 ...)
    local_rank: int | None = None  # torchrun --tee/-r [default3]:
    role: str | None = None  # torchrun role name from [default3]: / [trainer3]:
    task: int | None = None  # SLURM srun --label task id ("3: ")
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    device: int | None = None  # NCCL's [N]: the CUDA device index, not a rank
    level: str | None = None  # TRACE DEBUG INFO WARN ERROR FATAL
    timestamp: str | None = None  # the timestamp as printed
    epoch_s: float | None = None  # when the timestamp carries a full date (naive times read as UTC)
    day_s: float | None = None  # seconds since midnight, whenever a time of day was read
    source: str | None = None  # logger name or file:line that emitted the line
    stream: str | None = None  # stdout / stderr when the prefix says so
    kinds: tuple[str, ...] = ()  # which prefixes were stripped, outermost first


class _Table:
    """First character -> the rules a line can start with there, in priority order.

    Rules are tried one by one, each regex compiled once per process on first use. One big
    alternation per character matched a little faster per line, but compiling those
    alternations cost ~100 ms at start-up, and only a handful of lines ever reach this code.
    """

    def __init__(self, rules: tuple[Rule, ...]):
        assert all(not r.after or r.after == TS_KINDS for r in rules)  # one context kind is all we need
        self._by_char: dict[str, list[Rule]] = {}
        for rule in rules:
            for ch in rule.first_chars:
                self._by_char.setdefault(ch, []).append(rule)

    def get(self, ch: str) -> list[Rule] | None:
        return self._by_char.get(ch)


_STRONG_BY_CHAR = _Table(STRONG)
_WEAK_BY_CHAR = _Table(WEAK)


def _match(table: _Table, text: str, pos: int, last: str | None, outer: bool = True):
    rules = table.get(text[pos])
    if not rules:
        return None
    after_ts = last in TS_KINDS
    for rule in rules:
        if rule.after and not after_ts:
            continue
        m = rule.regex.match(text, pos)
        if m is None:
            continue
        # the first rule that matches decides, as the alternation did
        if m.end() == pos:
            return None
        if rule.outer_only and not outer:
            return None  # no other rule matches "12: " either, so nothing is lost by stopping
        return rule, m
    return None


_new = object.__new__
_set = object.__setattr__


def _make(values: dict) -> LinePrefix:
    # A generated __init__ costs one store per field (17 here); installing
    # the instance dict in one step is several times cheaper and the result is just as frozen.
    # Fields missing from `values` read as their defaults, which a record keeps on the class.
    obj = _new(LinePrefix)
    _set(obj, "__dict__", values)
    return obj


# Real stacks are at most ~6 deep; the cap keeps a pathological line ("[rank0]:" repeated
# for megabytes) from costing one loop turn per repetition.
MAX_PREFIXES = 16


def parse_prefix(line: str) -> LinePrefix:
    """Strip the stacked prefixes from one log line and say what they held. Never raises."""
    text = visible_text(line)
    n = len(text)
    pos = 0
    acc: Acc = {}
    kinds: list[str] = []
    last: str | None = None
    outer = True  # no process-level prefix read yet
    while pos < n and len(kinds) < MAX_PREFIXES:
        hit = _match(_STRONG_BY_CHAR, text, pos, last, outer)
        if hit is None:
            weak = _match(_WEAK_BY_CHAR, text, pos, last, outer)
            if weak is None or weak[1].end() >= n:
                break
            hit = _match(_STRONG_BY_CHAR, text, weak[1].end(), last, outer and weak[0].kind in OUTER_KINDS)
            if hit is None:
                break
            weak[0].handle(weak[1], acc)
            kinds.append(weak[0].kind)
            outer = outer and weak[0].kind in OUTER_KINDS
        rule, m = hit
        rule.handle(m, acc)
        kinds.append(rule.kind)
        last = rule.kind
        outer = outer and last in OUTER_KINDS
        pos = m.end()
    body = text[pos:] if pos else text
    # text is a suffix of the line minus its ending unless ANSI codes were cut out of it
    offset = len(line) - line_ending_len(line) - len(body) if len(text) <= len(line) and "\x1b" not in line else None
    if not kinds:
        return _make({"body": body, "offset": offset})
    acc.pop(SCORE, None)
    acc["body"], acc["offset"], acc["kinds"] = body, offset, tuple(kinds)
    return _make(acc)


@lru_cache(maxsize=2048)  # hit texts are cut to ~4 KB: 16 MB at the very worst, well under 1 MB for real lines
def parse_hit_prefix(text: str) -> LinePrefix:
    """parse_prefix for a matched line (a Hit's text, at most a few KB), remembered: the rank reading asks one line
    for its rank, time and body in turn, and the possible tier reads the same lines again; a directory of per-rank
    logs brings thousands of them. The result is frozen, so sharing it is safe."""
    return parse_prefix(text)
