"""The pattern set a scan looks for: every catalogue signature plus the structural lines the engine reads."""
from __future__ import annotations

import re

from gpudoctor.engine.lazyregex import LazyRegex
from gpudoctor.engine.regexcache import compile as compile_regex
from gpudoctor.kb.linear import compile_linear
from gpudoctor.kb.model import Entry, Signature
from gpudoctor.kb.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs every run start-up time
    from typing import Iterable

STRUCT = "@"  # owner of structural patterns, which no entry owns

# A rank that lost its peer: the line that finds one, and the words that classify an error as one.
LOST_PEER = (
    r"Connection (?:closed|reset) by (?:remote )?peer|remote worker crashing|Broken pipe|Failed to recv, got 0 bytes|"
    r"communicator was aborted|remote process exited|Connection refused|ProcessGroup[^#]*(?:aborted|shut ?down)|"
    r"NCCL communicator.*abort|aborted its NCCL communicators"
)
# (torch 1.8-1.11 ProcessGroupNCCL: "[Rank 1] Found key in store: NCCLABORTEDCOMM:..., from rank: 0. This means that
# rank has aborted its NCCL communicators previously and is not in a healthy state. Aborting appropriate communicators")

# Lines the engine parses to follow ranks, collectives and errors, whatever the catalogue says.
STRUCTURAL = {  # name: (regex, literals one of which every match contains; a test checks them)
    "traceback": (r"Traceback \(most recent call last\)", ("Traceback (most recent call last)",)),
    # a colon, but not C++'s "::" of a backtrace frame ("frame #1: c10::DistError::DistError(...)")
    "exception": (r"\b[A-Z][A-Za-z0-9_.]*(?:Error|Exception|Interrupt)\b(?::(?:[^:]|$)|$)",
                  ("Error", "Exception", "Interrupt")),
    # torch 2.4+ ranks that learn of a peer's timeout print only the dump-signal line ("... from rank 7"), and
    # 2.6+ spell the work counters with the backend's name ("Last enqueued NCCL work", "last completed nccl work")
    # torch 1.7-1.8 logged "[Rank 1] Caught collective operation timeout for work: WorkNCCL(...)" before the watchdog
    "watchdog": (r"[Cc]aught collective operation timeout|Timeout at NCCL work|[Ll]ast enqueued (?:\w+ )?work|"
                 r"Received a dump signal due to a collective timeout",
                 ("aught collective operation timeout", "Timeout at NCCL work", "ast enqueued ",
                  "Received a dump signal due to a collective timeout")),
    "gloo-timeout": (r"Timed out waiting \d+ ?ms for (?:recv|send)|\[Gloo\] .*(?:timed out|Timeout)|Gloo connectFullMesh failed",
                     ("Timed out waiting ", "[Gloo] ", "Gloo connectFullMesh failed")),
    "init-complete": (r"Init COMPLETE", ("Init COMPLETE",)),
    "nccl-warn": (r" NCCL WARN ", (" NCCL WARN ",)),
    "lost-peer": (LOST_PEER, ("Connection ", "Connection refused", "remote worker crashing", "Broken pipe", "Failed to recv, got 0 bytes",
                              "communicator was aborted", "remote process exited", "ProcessGroup", "NCCL communicator",
                              "aborted its NCCL communicators")),
    "signal": (r"Signal \d+ \(SIG[A-Z]+\) received by PID|exitcode\s*: -\d+", (") received by PID", "exitcode")),
    "mismatch": (r"Detected mismatch between collectives on ranks", ("Detected mismatch between collectives on ranks",)),
    # torchelastic's failure summary (torch/distributed/elastic/multiprocessing/errors/__init__.py, 1.9+): the block
    # under "Root Cause (first observed failure):" gives "  rank      : ${rank} (local_rank: ${local_rank})" and
    # "  exitcode  : ${exitcode} (pid: ${pid})" of the worker that failed first, by the agent's own account
    "elastic-root-cause": (r"Root Cause \(first observed failure\)", ("Root Cause (first observed failure)",)),
    # (the local rank alone: led by "rank\s*: \d+", hyperscan weighed every "rank" of NCCL's INFO lines, 12% of its
    # time on rank logs; engine/ranks.py reads the rank off the hit line)
    "elastic-rank": (r"\(local_rank: \d+\)", ("(local_rank: ",)),
    "elastic-exitcode": (r"\bexitcode\s*: -?\d+ \(pid: \d+\)", ("exitcode",)),
    # srun's account of tasks that ended badly (Slurm's launch plugin, _task_finish: "%s: %s %s: %s%s" with the hosts,
    # "task"/"tasks", the task ids, strsignal() and " (core dumped)"; "... Out Of Memory" for the cgroup OOM killer)
    "srun-task-exit": (r"srun: error: \S+: tasks? [\d,\-]+: ", ("srun: error: ",)),
    # torch.multiprocessing.spawn's ProcessExitedException (spawn.py, 1.4+): "process %d terminated with signal %s" and
    # "process %d terminated with exit code %d", the process index the worker was handed (its rank on one node)
    "spawn-exit": (r"process \d+ terminated with (?:signal SIG[A-Z]+|exit code -?\d+)", (" terminated with ",)),
    # Horovod's stall inspector (stall_inspector.cc, 0.20+) lists each missing rank and the tensors it never submitted
    "horovod-missing": (r"(?:^|[>:\]])\d{1,6}!?: \[\S", (": [",)),
}


@record(frozen=True)
class Pattern:
    index: int  # the id hyperscan reports
    owner: str  # an entry id, or STRUCT
    name: str  # the signature id, or the structural name
    regex: str
    caseless: bool
    literals: frozenset[str] | None  # one of these occurs in every match (lower-cased when caseless)
    signature: Signature | None = None
    user: bool = False  # from a runbook of the user's (--kb): matched by RE2 where it is installed

    @property
    def single(self) -> bool:
        """Context lines only need to be seen once per block: they may be common (every NCCL line)."""
        return self.signature is not None and self.signature.context


class PatternSet:
    """Compiled once per catalogue: Python regexes for verification, engine databases kept beside them."""

    def __init__(self, patterns: list[Pattern]):
        self.patterns = patterns
        self._compiled: list[re.Pattern | None] = [None] * len(patterns)
        self._bytes: dict[int, re.Pattern] = {}
        # patterns anchored at the start of a line's body: only they need the prefixes stripped to verify
        # (only a regex that opens with ^ or an inline flag can be one: the test skips the substitution for the rest,
        # which was 5 ms of every start)
        self.anchored = frozenset(p.index for p in patterns
                                  if p.regex[:1] in ("^", "(") and prefilter_regex(p.regex) != p.regex)
        self.engines: dict[str, object] = {}  # compiled engine databases, built once per pattern set

    def bytes_regex(self, index: int) -> re.Pattern:
        """The pattern as a bytes regex over whole blocks, as hyperscan reads them (a superset for ^ anchors)."""
        cache = self._bytes
        if index not in cache:
            p = self.patterns[index]
            loose = prefilter_regex(p.regex).encode("utf-8")
            linear = compile_linear(loose, p.caseless, multiline=True) if p.user else None
            flags = re.MULTILINE | (re.IGNORECASE if p.caseless else 0)
            cache[index] = linear if linear is not None else compile_regex(loose, flags)
        return cache[index]

    def regex(self, index: int) -> re.Pattern:
        """The Python regex of one pattern, compiled the first time a line needs it (a runbook's by RE2, in linear
        time, where RE2 is installed: see kb/linear.py)."""
        compiled = self._compiled[index]
        if compiled is None:
            p = self.patterns[index]
            linear = compile_linear(p.regex, p.caseless) if p.user else None
            compiled = linear if linear is not None else compile_regex(p.regex, re.IGNORECASE if p.caseless else 0)
            self._compiled[index] = compiled
        return compiled

    def loose_regex(self, index: int) -> re.Pattern:
        """prefilter_regex of one pattern (its ^ anchors dropped), for the pure-Python path."""
        p = self.patterns[index]
        linear = compile_linear(prefilter_regex(p.regex), p.caseless) if p.user else None
        return linear if linear is not None else compile_regex(prefilter_regex(p.regex),
                                                                re.IGNORECASE if p.caseless else 0)

    @classmethod
    def from_entries(cls, entries: Iterable[Entry]) -> "PatternSet":
        patterns: list[Pattern] = []
        for name, (regex, literals) in STRUCTURAL.items():
            patterns.append(Pattern(len(patterns), STRUCT, name, crlf_tolerant(regex), False, frozenset(literals)))
        for entry in entries:
            for sig in entry.signatures:
                if sig.derived:
                    continue  # computed from the whole log set, not matched line by line
                # literals and case were worked out when the catalogue was loaded (and cached)
                patterns.append(Pattern(len(patterns), entry.id, sig.id, crlf_tolerant(sig.pattern), sig.caseless,
                                        frozenset(sig.literals), sig, entry.origin == "user"))
        return cls(patterns)

    def literal_table(self, indexes: Iterable[int] | None = None):
        """(case-sensitive literals, caseless literals, patterns with no literal, single-match patterns)
        for the pure-Python path, over all patterns or the given ones."""
        exact: dict[str, list[int]] = {}
        folded: dict[str, list[int]] = {}
        bare: list[int] = []
        singles: list[Pattern] = []
        chosen = self.patterns if indexes is None else [self.patterns[i] for i in indexes]
        for p in chosen:
            if not p.literals:
                bare.append(p.index)
                continue
            if p.single:
                singles.append(p)
                continue
            table = folded if p.caseless else exact
            for lit in p.literals:
                table.setdefault(lit, []).append(p.index)
        return sorted(exact.items()), sorted(folded.items()), bare, singles


def prefilter_regex(regex: str) -> str:
    """The regex as the compiled engines read whole blocks: a superset of the per-line Python match."""
    # Python verifies each line's text with its prefixes stripped, so a leading ^ means "start of
    # the body", which hyperscan cannot see in the raw line: drop it to keep a superset.
    return _LEADING_CARET.sub(r"\1", regex)


_LEADING_CARET = LazyRegex(r"^((?:\(\?[a-zA-Z]+\))?)\^")


def crlf_tolerant(regex: str) -> str:
    """regex with each end-of-line anchor `$` also taking a carriage return before it: a log saved on Windows or
    copied from a web page ends its lines with CRLF, and `$` stops only before the newline."""
    if "$" not in regex:
        return regex
    out, in_class, i = [], False, 0
    while i < len(regex):
        ch = regex[i]
        if ch == "\\":
            out.append(regex[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]" or (out and out[-1] in ("[", "[^"))
        elif ch == "[":
            in_class = True
            if regex[i + 1:i + 2] == "^":
                out.append("[^")
                i += 2
                continue
        elif ch == "$" and "".join(out[-2:]) not in ("\\s*", "\\s+", "\\s?"):  # \s takes the \r already
            ch = r"\r?$"
        out.append(ch)
        i += 1
    return "".join(out)
