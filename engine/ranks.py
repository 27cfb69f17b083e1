"""Follow each rank through the logs as they are scanned: its status, last line, first error and where it blocked
(the judgement across ranks is in rank_verdict.py)."""
from __future__ import annotations

import re

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.gating import is_rank_zero_wrapper
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.patterns import LOST_PEER, STRUCT, PatternSet
from gpudoctor.engine.rank_model import COLLECTIVES, RankReport, RankState
from gpudoctor.engine.rank_verdict import derive, judge, merge_flight
from gpudoctor.engine.scan import Hit

_INIT_RANK = _lazy(r"\brank (\d+) nranks (\d+)\b")
_TIMEOUT = _lazy(r"Watchdog caught|[Tt]imed out|[Tt]imeout|timing out|DEADLINE_EXCEEDED")
_DESYNC = _lazy(r"Detected mismatch between collectives|doesn't match expected size|EnforceNotMet|"
                     r"Message truncated|Collectives differ")
_LAUNCHER_ERRORS = {"ChildFailedError", "ProcessExitedException", "ProcessRaisedException", "SignalException"}
_LOST_PEER = _lazy(LOST_PEER)
# every prefix that carries a rank has one of these near the start of the line
_RANK_PREFIX_HINT = _lazy(r"\[(?:rank|default|trainer|worker)?\d+\]:|\[\d+,\d+\]<|rank=\d|\[Rank \d")
_SCRIPT_RANK = _lazy(r"^\[(?:rank|Rank|RANK) ?(\d{1,6})\]")  # a script's own "[rank3] epoch 2 done"


def _prefix(text: str):
    """A matched line's prefixes, parsed once per line however often the rank reading asks."""
    from gpudoctor.engine.prefix import parse_hit_prefix

    return parse_hit_prefix(text)


def prefix_rank(text: str) -> int | None:
    """The rank a line's prefix names, without parsing lines that cannot carry one."""
    if not _RANK_PREFIX_HINT.search(text, 0, 200):
        return None
    return _prefix(text).rank


# a rank that never reached the job's store (the address or port it was given leads nowhere, or to something else):
# a rendezvous that failed, not the rank's own crash
_NEVER_MET = _lazy(r"Ping failed, invalid value returned from server|The client socket has failed to connect")


def classify(text: str) -> str:
    """crash (the rank's own error), timeout, lost-peer (a consequence of another rank), desync, interrupted (stopped
    by hand: Ctrl-C raises KeyboardInterrupt wherever the process was, most often a run that no longer moved)."""
    if "KeyboardInterrupt" in text:
        return "interrupted"
    if _DESYNC.search(text):
        return "desync"
    if _TIMEOUT.search(text) or _NEVER_MET.search(text):
        return "timeout"
    if _LOST_PEER.search(text):
        return "lost-peer"
    return "crash"


class RankAnalysis:
    """Per-rank reading of each source as it is scanned, then the cross-rank judgement at the end."""

    def __init__(self, patterns: PatternSet, per_rank_files: bool):
        self.index = {p.name: p.index for p in patterns.patterns if p.owner == STRUCT}
        self.state = RankState()
        self.per_rank_files = per_rank_files  # a rank in a file name means something only among several files

    def add(self, source, scan) -> None:
        _read_source(self.state, source, scan, self.index, self.per_rank_files)

    def finish(self, flight=None):
        """(per-rank reports sorted by rank, verdict sentences, derived signals name -> [(file, Hit)])."""
        state = self.state
        if flight is not None:
            merge_flight(state.reports, flight)
        if state.world and len(state.reports) > 1:
            for rank in range(state.world):
                if rank not in state.reports:
                    state.reports[rank] = RankReport(rank, status="missing")
        derive(state)
        reports = state.reports
        judged = len(reports) > 1 or any(r.first_error for r in reports.values())
        verdict = judge(reports, state.world, state.orphan_crashes) if judged else []
        return sorted(reports.values(), key=lambda r: r.rank), verdict, state.signals


def _hint(source, per_rank_files: bool) -> int | None:
    if not per_rank_files:
        return None
    if source.rank_hint is not None:
        return source.rank_hint
    return source.local_rank_hint


def _named_ranks(scan) -> set[int]:
    """The ranks the file's own lines name in their prefixes ([rank2]:), read off its last lines and the first line of
    each window around an error."""
    texts = [text for _, text in scan.tail] + [lines[0] for _, _, lines in scan.windows if lines]
    return {rank for rank in map(prefix_rank, texts) if rank is not None}


# torch.multiprocessing.spawn's ProcessRaisedException: "-- Process 1 terminated with the following error:" then the
# worker's own traceback. The process index is the first argument spawn hands the worker, the rank on one node
_SPAWN_HEADER = _lazy(r"^-- Process (\d+) terminated with the following error:")


def _spawned_process(lines: list[str], start: int) -> int | None:
    """The spawn index a traceback that starts at lines[start] belongs to, from the header just above it."""
    for line in reversed(lines[max(0, start - 3): start]):
        if line.strip():
            m = _SPAWN_HEADER.match(line.strip())
            return int(m.group(1)) if m else None
    return None


def _read_source(state: RankState, source, scan, index: dict[str, int], per_rank_files: bool) -> None:
    hint = _hint(source, per_rank_files)
    if hint is not None:
        named = _named_ranks(scan)
        if named and hint not in named:
            # the lines say which rank they are and the name disagrees: the number in the name was a local rank
            # (node0/rank0.log and node1/rank0.log, a folder per node), and the lines' own ranks win
            hint = named.pop() if len(named) == 1 else None
    init_hits = scan.hits.get(index["init-complete"])
    if init_hits:
        named = set()
        for hit in init_hits.all():
            m = _INIT_RANK.search(hit.text)
            if not m:
                continue
            state.world = max(state.world or 0, int(m.group(2)))
            named_rank = prefix_rank(hit.text)
            rank = named_rank if named_rank is not None else int(m.group(1))
            named.add(rank)
            state.rank(rank).init_complete = True
        if hint is None and len(named) == 1:
            hint = named.pop()  # a per-process NCCL_DEBUG_FILE names its rank this way
    seen: set[int] = set()

    def rank_of(text: str) -> int | None:
        rank = prefix_rank(text)
        return hint if rank is None else rank

    # tracebacks first: they say what each rank raised and where it was blocked
    cut: list = []  # (rank, traceback, its header) of tracebacks that end before their error line
    for opener, line_no, lines in scan.windows:
        if opener != "traceback":
            continue
        from gpudoctor.engine.tracebacks import parse_tracebacks  # only logs with a traceback pay for it

        for tb in parse_tracebacks(lines):
            rank = tb.rank if tb.rank is not None else _spawned_process(lines, tb.start)
            rank = hint if rank is None else rank
            if _stopped_by_hand(tb, lines):
                state.signal("run-interrupted", scan.name, Hit(line_no + tb.start, lines[tb.start]))
            if not tb.exc_type and rank is not None and tb.frames and len(cut) < 8:
                cut.append((rank, tb, Hit(line_no + tb.start, lines[tb.start])))
            if not tb.exc_type or tb.exc_type.rsplit(".", 1)[-1] in _LAUNCHER_ERRORS:
                continue
            text = f"{tb.exc_type}: {tb.message}".strip()
            name = tb.exc_type.rsplit(".", 1)[-1]
            at = _find_line(lines, tb.start, tb.end, name + ":")
            if at is None and not tb.message:  # "KeyboardInterrupt", "StopIteration": the name alone on its line
                at = _find_line(lines, tb.start, tb.end, name)
            hit = Hit(line_no + at, lines[at]) if at is not None else Hit(line_no + tb.start, text)
            _via_rank_zero_wrapper(state, scan.name, tb, lines, line_no)
            if rank is None:
                if classify(text) == "crash" and len(state.orphan_crashes) < 8:
                    state.orphan_crashes.append(Evidence(scan.name, hit.line_no, hit.text, "crash"))
                continue
            seen.add(rank)
            r = state.rank(rank)
            _record_error(state, r, scan.name, hit, text)
            blocked, caller = _blocked_in(tb)
            if blocked and r.blocked_in is None:
                r.blocked_in = blocked
                if caller is not None:
                    r._caller_source = caller.source
                    at = _find_line(lines, tb.start, tb.end, f"line {caller.line}, in {caller.function}")
                    r.blocked_from = Evidence(scan.name, line_no + (at if at is not None else tb.start),
                                              lines[at] if at is not None else caller.file,
                                              f"{caller.function}")
    for name in ("watchdog", "gloo-timeout", "exception", "signal", "lost-peer", "mismatch", "nccl-warn"):
        hits = scan.hits.get(index[name])
        if not hits:
            continue
        for hit in hits.all():
            kind = "timeout" if name in ("watchdog", "gloo-timeout") else classify(hit.text)
            if name in ("watchdog", "gloo-timeout"):
                state.signal("collective-timeout", scan.name, hit)
            elif kind == "lost-peer" and name in ("lost-peer", "exception"):
                state.signal("lost-peer", scan.name, hit)
            rank = rank_of(hit.text)
            wd = None
            if name == "watchdog":
                from gpudoctor.engine.watchdog import parse_watchdog

                wd = parse_watchdog(_prefix(hit.text).body)
                if rank is None and wd is not None:
                    rank = wd.rank  # c10d names its rank inside the message ("[Rank 1] Watchdog caught ...")
            if rank is None:
                continue
            seen.add(rank)
            r = state.rank(rank)
            if name == "watchdog":
                if wd is not None:
                    if wd.last_enqueued is not None:
                        r.last_enqueued = max(r.last_enqueued or 0, wd.last_enqueued)
                    if wd.last_completed is not None:
                        r.last_completed = max(r.last_completed or 0, wd.last_completed)
                    if wd.seq is not None and wd.op_type and wd.kind == "nccl_timeout" and r.timed_out_work is None:
                        r.timed_out_work = (wd.pg_id, wd.seq, wd.op_type, wd.numel_in, wd.numel_out)
                        r.timed_out_line = Evidence(scan.name, hit.line_no, hit.text, "watchdog")
                    if wd.seq is not None and r.timed_out_in is None:
                        r.timed_out_in = f"{wd.op_type or 'collective'} #{wd.seq}"
                        if r.last_completed is None:
                            r.last_completed = wd.seq - 1
            if name == "exception" and any(e in hit.text for e in _LAUNCHER_ERRORS):
                continue
            if name in ("exception", "watchdog", "gloo-timeout", "signal", "mismatch"):
                _record_error(state, r, scan.name, hit, hit.text)
    hits = scan.hits.get(index["horovod-missing"])
    if hits:
        _horovod_stall(state, scan.name, hits.all())
    roots = scan.hits.get(index["elastic-root-cause"])
    if roots:
        _elastic_root_cause(state, scan, index, roots.all())
    elif not scan.hits.get(index["elastic-rank"]):
        _srun_task_deaths(state, scan, index)
        _spawn_deaths(state, scan, index)
    # a rank whose traceback was cut before its error line, with no error of its own anywhere in the input and not
    # stopped in a collective (where waiting ranks stop), raised something itself: a pasted excerpt lost the line
    for rank, tb, hit in cut:
        r = state.rank(rank)
        if r.first_error is None and _blocked_in(tb)[0] is None:
            seen.add(rank)
            _record_error(state, r, scan.name, hit, "traceback cut before its error line")
    if hint is not None:
        seen.add(hint)
    for rank in seen:
        r = state.rank(rank)
        if scan.name not in r.sources:
            r.sources.append(scan.name)
    if hint is not None and scan.tail and hint in state.reports:
        line_no, text = scan.tail[-1]  # a per-rank file: its last line is that rank's last word
        r = state.reports[hint]
        r.last_line = Evidence(scan.name, line_no, text, "last-line")
        r.last_time = _prefix(text).timestamp or r.last_time
    elif hint is None:
        _rank_tails(state, scan)
        for line_no, text in scan.tail:
            rank = prefix_rank(text)
            if rank is not None and rank in state.reports:
                r = state.reports[rank]
                r.last_line = Evidence(scan.name, line_no, text, "last-line")
                r.last_time = _prefix(text).timestamp or r.last_time


def _rank_tails(state: RankState, scan) -> None:
    """Each rank's last line near the end of one merged log: a rank that printed no error anywhere is known by it
    (the rank that left the loop while the others waited for it)."""
    for line_no, text in scan.rank_tail.values():
        rank = prefix_rank(text)
        if rank is None:  # a script's own "[rank3] ...", bare or under torchrun --tee's "[default3]:"
            head = _prefix(text)
            m = _SCRIPT_RANK.match(head.body)
            rank = int(m.group(1)) if m else head.local_rank
            if rank is None:
                continue
        if state.world and rank >= state.world:
            continue
        r = state.rank(rank)
        if scan.name not in r.sources:
            r.sources.append(scan.name)
        if r.last_line is None or (r.last_line.file == scan.name and r.last_line.line < line_no):
            r.last_line = Evidence(scan.name, line_no, text, "last-line")
            r.last_time = _prefix(text).timestamp or r.last_time


_ELASTIC_RANK = _lazy(r"\brank\s*: (\d+) \(local_rank: \d+\)")
_ELASTIC_EXIT = _lazy(r"\bexitcode\s*: (-?\d+) \(pid: \d+\)")
_CRASH_SIGNALS = {-9, -11, -7, -4, -8}  # SIGKILL (the OOM killer), SIGSEGV, SIGBUS, SIGILL, SIGFPE


def _elastic_root_cause(state: RankState, scan, index: dict[str, int], roots: list[Hit]) -> None:
    """torchelastic's failure summary names the rank that failed first and its exit code. One killed by a signal (the
    OOM killer's SIGKILL, a segfault) printed no error of its own and would otherwise read as a silent rank (one that
    left the loop early); this records its death as its error."""
    rank_hits, exit_hits = scan.hits.get(index["elastic-rank"]), scan.hits.get(index["elastic-exitcode"])
    if not rank_hits or not exit_hits:
        return
    for root in roots:
        at = next((h for h in rank_hits.all() if root.line_no < h.line_no <= root.line_no + 6), None)
        code_hit = next((h for h in exit_hits.all() if at is not None and at.line_no < h.line_no <= at.line_no + 2), None)
        said_rank = _ELASTIC_RANK.search(at.text) if code_hit is not None else None
        if said_rank is None:
            continue
        rank = int(said_rank.group(1))
        # only a death by a signal no rank sends itself on a timeout counts: an exit code of 1 or an abort (SIGABRT is
        # how NCCL's async error handling ends a rank that timed out) is as often a waiting rank that gave up first
        if int(_ELASTIC_EXIT.search(code_hit.text).group(1)) not in _CRASH_SIGNALS:
            continue
        _launcher_saw_die(state, scan.name, rank, code_hit)


def _launcher_saw_die(state: RankState, file: str, rank: int, hit: Hit) -> None:
    """A rank its launcher (torchelastic, srun) says was killed: that is its error, unless it printed one itself."""
    if state.world and rank >= state.world:
        return
    r = state.rank(rank)
    if file not in r.sources:
        r.sources.append(file)
    if r.first_error is None:
        _record_error(state, r, file, hit, hit.text)


# the deaths srun reports that no rank inflicts on itself while waiting (as for torchelastic's exit codes above): a
# signal from outside, or the cgroup's OOM killer; an exit code or SIGABRT is as often a rank that gave up waiting
_SRUN_DEATH = _lazy(r"srun: error: \S+: tasks? ([\d,\-]+): (Out Of Memory|Killed|Segmentation fault|Bus error|"
                    r"Illegal instruction|Floating point exception)")
MAX_SRUN_TASKS = 1024


def _srun_task_deaths(state: RankState, scan, index: dict[str, int]) -> None:
    """srun's "task 3: Killed" names a rank that died without a word of its own, when each task is a rank (srun
    python train.py). Not under torchrun, whose agent is one task per node (the caller checks: no elastic lines)."""
    hits = scan.hits.get(index["srun-task-exit"])
    if not hits:
        return
    for hit in hits.all():
        m = _SRUN_DEATH.search(hit.text)
        if m is None:
            continue
        for task in _task_ids(m.group(1)):
            _launcher_saw_die(state, scan.name, task, hit)


_SPAWN_DEATH = _lazy(r"process (\d+) terminated with signal (SIGKILL|SIGSEGV|SIGBUS|SIGILL|SIGFPE)\b")


def _spawn_deaths(state: RankState, scan, index: dict[str, int]) -> None:
    """mp.spawn's "process 1 terminated with signal SIGKILL": that process died without a word of its own. An exit
    code (or SIGABRT) is left: as often a process that gave up waiting first."""
    hits = scan.hits.get(index["spawn-exit"])
    for hit in hits.all() if hits else ():
        m = _SPAWN_DEATH.search(hit.text)
        if m is not None:
            _launcher_saw_die(state, scan.name, int(m.group(1)), hit)


def _task_ids(spec: str) -> list[int]:
    """Slurm's task list ("0-3,7") as ids, at most MAX_SRUN_TASKS of them."""
    ids: list[int] = []
    for part in spec.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            continue
        ids += range(int(lo), min(int(hi or lo), int(lo) + MAX_SRUN_TASKS) + 1)
        if len(ids) >= MAX_SRUN_TASKS:
            break
    return ids[:MAX_SRUN_TASKS]


_HVD_MISSING = _lazy(r"(?:^|[>:\]])(\d{1,6})!?: \[([^\]]*)")
_HVD_OP = _lazy(r"(?i)(allreduce|broadcast|allgather|alltoall|reducescatter)")
_HVD_GRADIENT = _lazy(r"(?i)grad|Distributed\w*Optimizer")
_HVD_COLLECTIVE = {"allreduce": "all_reduce", "broadcast": "broadcast", "allgather": "all_gather",
                   "alltoall": "all_to_all", "reducescatter": "reduce_scatter"}


def _horovod_stall(state: RankState, file: str, hits: list[Hit]) -> None:
    """Horovod's stall reports ("Missing ranks:" then "1: [allreduce.fc.weight, ...]" per rank): a rank missing
    only some kinds of collective submitted the other kinds, so it waits in those while its peers wait in the ones it
    lacks; the first report with two kinds says the ranks are blocked in different collectives."""
    reports: list[list[Hit]] = []
    for hit in hits:  # one report's lines run on
        if reports and hit.line_no == reports[-1][-1].line_no + 1:
            reports[-1].append(hit)
        else:
            reports.append([hit])
    for report in reports:
        missing: dict[int, tuple[set[str], Hit, list[str]]] = {}
        for hit in report:
            m = _HVD_MISSING.search(_prefix(hit.text).body) or _HVD_MISSING.search(hit.text)
            names = m.group(2).split(", ") if m else []
            kinds = {k.group(1).lower() for k in map(_HVD_OP.search, names) if k}
            if kinds:
                missing[int(m.group(1))] = (kinds, hit, names)
        every = set().union(*(k for k, _, _ in missing.values())) if missing else set()
        if len(every) >= 2:
            break
    else:
        return
    for rank, (kinds, hit, _names) in missing.items():
        submitted = every - kinds
        if len(submitted) != 1:
            continue
        kind = submitted.pop()
        # what this rank submitted is what the others lack: gradients (DistributedOptimizer's allreduce) are the
        # backward pass every rank runs, not a collective some branch of the code adds
        theirs = [n for other, (_, _, names) in missing.items() if other != rank for n in names
                  if (k := _HVD_OP.search(n)) and k.group(1).lower() == kind]
        r = state.rank(rank)
        if r.blocked_in is None:
            r.blocked_in = "backward" if theirs and all(map(_HVD_GRADIENT.search, theirs)) else _HVD_COLLECTIVE[kind]
            r.blocked_from = Evidence(file, hit.line_no, hit.text, "horovod stall report")
        if file not in r.sources:
            r.sources.append(file)


def _via_rank_zero_wrapper(state: RankState, file: str, tb, lines: list[str], line_no: int) -> None:
    """A traceback that ends in a collective reached through a rank-zero-only wrapper: a collective that only rank 0
    calls (D21), whichever rank printed it and whether or not the other ranks' logs are here."""
    if _blocked_in(tb)[0] not in COLLECTIVES:
        return
    wrapper = next((f for f in tb.frames if is_rank_zero_wrapper(f.file, f.function)), None)
    if wrapper is None:
        return
    at = _find_line(lines, tb.start, tb.end, f"line {wrapper.line}, in wrapped_fn")
    i = at if at is not None else tb.start
    state.signal("collective-in-gated-path", file, Hit(line_no + i, lines[i]))


def _find_line(lines: list[str], start: int, end: int, needle: str) -> int | None:
    """Index of the last line in lines[start:end] that contains needle."""
    for i in range(min(end, len(lines)) - 1, max(start, 0) - 1, -1):
        if needle in lines[i]:
            return i
    return None


def _record_error(state: RankState, r: RankReport, file: str, hit: Hit, text: str) -> None:
    kind = classify(text)
    if kind == "timeout":
        state.signal("collective-timeout", file, hit)
    elif kind == "lost-peer":
        state.signal("lost-peer", file, hit)
    prefix = _prefix(hit.text)
    when = prefix.epoch_s if prefix.epoch_s is not None else prefix.day_s
    # a rank's own crash outranks the timeouts and lost peers it then reports
    better = r.first_error is None or (kind == "crash" and r.error_kind != "crash")
    if better:
        r.first_error = Evidence(file, hit.line_no, hit.text, kind)
        r.error_kind = kind
        r._first_epoch = when


_CALLS_COLLECTIVE = _lazy(r"\b(" + "|".join(sorted(COLLECTIVES, key=len, reverse=True)) + r")\(")


def _stopped_by_hand(tb, lines: list[str]) -> bool:
    """A traceback of KeyboardInterrupt, or one whose header follows the terminal's echo of Ctrl-C ("^CTraceback")
    and was cut before its exception line."""
    if tb.exc_type:
        return tb.exc_type.rsplit(".", 1)[-1] == "KeyboardInterrupt"
    return "^C" in lines[tb.start]


def _blocked_in(tb):
    """The collective (or DDP backward) a traceback ends in, and the last user frame that called it."""
    blocked, caller = None, None
    for frame in tb.frames:
        fn = frame.function or ""
        if frame.is_user:
            caller = frame
            if frame.source and re.search(r"\.backward\(", frame.source):
                blocked = "backward"
        elif fn in COLLECTIVES and "distributed" in frame.file:
            blocked = fn
            break
        elif fn == "wrapper" and "c10d_logger" in frame.file and caller is not None and caller.source:
            # torch 2.1+ wraps each collective in c10d_logger's exception logger; an exception raised while that
            # wrapper handled another (Ctrl-C during a failed wait) ends there, and the caller's line names the call
            m = _CALLS_COLLECTIVE.search(caller.source)
            if m is not None:
                blocked = m.group(1)
                break
        elif fn in ("run_backward", "_engine_run_backward") and blocked is None:
            blocked = "backward"
    return blocked, caller
