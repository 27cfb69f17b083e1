"""Follow each rank through the logs, name the one that fell behind or died first, and derive cross-rank signals."""
from __future__ import annotations

import re

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.gating import is_gated_function, is_rank0_branch, is_rank_zero_wrapper
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.patterns import LOST_PEER, STRUCT, PatternSet
from gpudoctor.engine.scan import Hit
from gpudoctor.kb.record import field, record

_INIT_RANK = _lazy(r"\brank (\d+) nranks (\d+)\b")
_TIMEOUT = _lazy(r"Watchdog caught|[Tt]imed out|[Tt]imeout|timing out|DEADLINE_EXCEEDED")
_DESYNC = _lazy(r"Detected mismatch between collectives|doesn't match expected size|EnforceNotMet|"
                     r"Message truncated|Collectives differ")
_LAUNCHER_ERRORS = {"ChildFailedError", "ProcessExitedException", "ProcessRaisedException", "SignalException"}
_LOST_PEER = _lazy(LOST_PEER)
_COLLECTIVES = {
    "barrier", "monitored_barrier", "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor",
    "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather",
    "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single", "send", "recv",
}
SIGNALS = ("collective-timeout", "lost-peer", "rank-failed-first", "ranks-in-different-collectives",
           "collective-in-gated-path", "rank-left-loop-early")
# what a training step blocks in: a rank that timed out here was still training
_STEP_COLLECTIVES = {"backward", "all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather",
                     "all_gather_into_tensor", "broadcast"}


@record
class RankReport:
    rank: int
    sources: list[str] = field(default_factory=list)
    last_line: Evidence | None = None
    last_time: str | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    timed_out_in: str | None = None  # "ALLREDUCE #57" when this rank's watchdog fired
    init_complete: bool | None = None
    first_error: Evidence | None = None
    error_kind: str | None = None  # crash (its own error), timeout (waiting on others), lost-peer, desync
    blocked_in: str | None = None  # the collective its traceback ends in: "barrier", "backward"
    blocked_from: Evidence | None = None  # the user frame that called it
    status: str = "ok"  # ok | died | behind | waiting | lost-peer | missing | no-init
    _caller_source: str | None = field(default=None, repr=False)  # the code line of blocked_from
    _first_epoch: float | None = field(default=None, repr=False)


# every prefix that carries a rank has one of these near the start of the line
_RANK_PREFIX_HINT = _lazy(r"\[(?:rank|default|trainer|worker)?\d+\]:|\[\d+,\d+\]<|rank=\d|\[Rank \d")


def _prefix(text: str):
    """A matched line's prefixes, parsed once per line however often the rank reading asks."""
    from gpudoctor.engine.prefix import parse_hit_prefix

    return parse_hit_prefix(text)


def prefix_rank(text: str) -> int | None:
    """The rank a line's prefix names, without parsing lines that cannot carry one."""
    if not _RANK_PREFIX_HINT.search(text, 0, 200):
        return None
    return _prefix(text).rank


def classify(text: str) -> str:
    """crash (the rank's own error), timeout, lost-peer (a consequence of another rank), desync."""
    if _DESYNC.search(text):
        return "desync"
    if _TIMEOUT.search(text):
        return "timeout"
    if _LOST_PEER.search(text):
        return "lost-peer"
    return "crash"


@record
class _State:
    reports: dict[int, RankReport] = field(default_factory=dict)
    signals: dict[str, list[tuple[str, Hit]]] = field(default_factory=dict)
    world: int | None = None
    orphan_crashes: list[Evidence] = field(default_factory=list)  # errors no rank prefix claims

    def rank(self, rank: int) -> RankReport:
        if rank not in self.reports:
            self.reports[rank] = RankReport(rank)
        return self.reports[rank]

    def signal(self, name: str, file: str, hit: Hit) -> None:
        found = self.signals.setdefault(name, [])
        if len(found) < 6 and all(h.line_no != hit.line_no or f != file for f, h in found):
            found.append((file, hit))


class RankAnalysis:
    """Per-rank reading of each source as it is scanned, then the cross-rank judgement at the end."""

    def __init__(self, patterns: PatternSet, per_rank_files: bool):
        self.index = {p.name: p.index for p in patterns.patterns if p.owner == STRUCT}
        self.state = _State()
        self.per_rank_files = per_rank_files  # a rank in a file name means something only among several files

    def add(self, source, scan) -> None:
        _read_source(self.state, source, scan, self.index, self.per_rank_files)

    def finish(self, flight=None):
        """(per-rank reports sorted by rank, verdict sentences, derived signals name -> [(file, Hit)])."""
        state = self.state
        if flight is not None:
            _merge_flight(state.reports, flight)
        if state.world and len(state.reports) > 1:
            for rank in range(state.world):
                if rank not in state.reports:
                    state.reports[rank] = RankReport(rank, status="missing")
        _derive(state)
        reports = state.reports
        judged = len(reports) > 1 or any(r.first_error for r in reports.values())
        verdict = _judge(reports, state.world, state.orphan_crashes) if judged else []
        return sorted(reports.values(), key=lambda r: r.rank), verdict, state.signals


def _hint(source, per_rank_files: bool) -> int | None:
    if not per_rank_files:
        return None
    if source.rank_hint is not None:
        return source.rank_hint
    return source.local_rank_hint


def _read_source(state: _State, source, scan, index: dict[str, int], per_rank_files: bool) -> None:
    hint = _hint(source, per_rank_files)
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
            rank = tb.rank if tb.rank is not None else hint
            if not tb.exc_type and rank is not None and tb.frames and len(cut) < 8:
                cut.append((rank, tb, Hit(line_no + tb.start, lines[tb.start])))
            if not tb.exc_type or tb.exc_type.rsplit(".", 1)[-1] in _LAUNCHER_ERRORS:
                continue
            text = f"{tb.exc_type}: {tb.message}".strip()
            at = _find_line(lines, tb.start, tb.end, tb.exc_type.rsplit(".", 1)[-1] + ":")
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
            if rank is None:
                continue
            seen.add(rank)
            r = state.rank(rank)
            if name == "watchdog":
                from gpudoctor.engine.watchdog import parse_watchdog

                wd = parse_watchdog(_prefix(hit.text).body)
                if wd is not None:
                    if wd.last_enqueued is not None:
                        r.last_enqueued = max(r.last_enqueued or 0, wd.last_enqueued)
                    if wd.last_completed is not None:
                        r.last_completed = max(r.last_completed or 0, wd.last_completed)
                    if wd.seq is not None and r.timed_out_in is None:
                        r.timed_out_in = f"{wd.op_type or 'collective'} #{wd.seq}"
                        if r.last_completed is None:
                            r.last_completed = wd.seq - 1
            if name == "exception" and any(e in hit.text for e in _LAUNCHER_ERRORS):
                continue
            if name in ("exception", "watchdog", "gloo-timeout", "signal", "mismatch"):
                _record_error(state, r, scan.name, hit, hit.text)
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
        for line_no, text in scan.tail:
            rank = prefix_rank(text)
            if rank is not None and rank in state.reports:
                r = state.reports[rank]
                r.last_line = Evidence(scan.name, line_no, text, "last-line")
                r.last_time = _prefix(text).timestamp or r.last_time


def _via_rank_zero_wrapper(state: _State, file: str, tb, lines: list[str], line_no: int) -> None:
    """A traceback that ends in a collective reached through a rank-zero-only wrapper: a collective that only rank 0
    calls (D21), whichever rank printed it and whether or not the other ranks' logs are here."""
    if _blocked_in(tb)[0] not in _COLLECTIVES:
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


def _record_error(state: _State, r: RankReport, file: str, hit: Hit, text: str) -> None:
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


def _blocked_in(tb):
    """The collective (or DDP backward) a traceback ends in, and the last user frame that called it."""
    blocked, caller = None, None
    for frame in tb.frames:
        fn = frame.function or ""
        if frame.is_user:
            caller = frame
            if frame.source and re.search(r"\.backward\(", frame.source):
                blocked = "backward"
        elif fn in _COLLECTIVES and "distributed" in frame.file:
            blocked = fn
            break
        elif fn in ("run_backward", "_engine_run_backward") and blocked is None:
            blocked = "backward"
    return blocked, caller


def _derive(state: _State) -> None:
    reports = state.reports.values()
    waiting = [r for r in reports if r.error_kind in ("timeout", "lost-peer", "desync")]
    crashed = [r for r in reports if r.error_kind == "crash"]
    others_waited = bool(waiting or state.signals.get("collective-timeout") or state.signals.get("lost-peer"))
    if others_waited:
        state.signals.setdefault("ranks-waiting", list(state.signals.get("collective-timeout", []))
                                 + list(state.signals.get("lost-peer", []))[:6])
    if crashed and others_waited:
        first = _earliest(crashed)
        state.signal("rank-failed-first", first.first_error.file, Hit(first.first_error.line, first.first_error.text))
    elif state.orphan_crashes and waiting:
        # a crash no rank prefix claims (a plain `python` per rank, a worker thread) before ranks timed out
        first = min(state.orphan_crashes, key=lambda e: (e.file, e.line))
        state.signal("rank-failed-first", first.file, Hit(first.line, first.text))
    blocked = {}
    for r in reports:
        if r.blocked_in and r.error_kind in ("timeout", "lost-peer", "desync", None):
            blocked.setdefault(r.blocked_in, []).append(r)
    if len(blocked) > 1:
        for name, ranks in blocked.items():
            ev = ranks[0].first_error
            if ev is not None:
                state.signal("ranks-in-different-collectives", ev.file, Hit(ev.line, ev.text))
        fewest = min(len(v) for v in blocked.values())
        # every smallest group is a candidate odd one out (a 1-vs-1 tie has two)
        for r in (r for group in blocked.values() if len(group) == fewest for r in group):
            smallest = [x for x in blocked.values() if r in x][0]
            caller = r.blocked_from
            gated_name = caller is not None and (is_gated_function(caller.signature)
                                                 or is_rank0_branch(getattr(r, "_caller_source", None)))
            # rank 0 alone in another collective is the `if rank == 0:` branch in all but name
            rank0_alone = len(smallest) == 1 and r.rank == 0
            if gated_name or rank0_alone:
                ev = caller or r.first_error
                if ev is not None:
                    state.signal("collective-in-gated-path", ev.file, Hit(ev.line, ev.text))

    _left_loop_early(state)


def _left_loop_early(state: _State) -> None:
    """A rank left the training loop while the others timed out inside a step: its log ends without an error
    of its own, or it waits in a collective (a barrier, say) that the step does not call."""
    reports = list(state.reports.values())
    in_step = [r for r in reports if r.error_kind == "timeout" and r.blocked_in in _STEP_COLLECTIVES]
    if not in_step or any(r.error_kind == "crash" for r in reports):
        return  # nobody was caught inside a step, or a rank's own crash explains the wait
    steps = {r.blocked_in for r in in_step}
    left = []
    for r in reports:
        if r in in_step or r.status == "missing":
            continue
        silent = r.error_kind is None and r.sources and r.last_line is not None and r.init_complete is not False
        elsewhere = r.blocked_in is not None and r.blocked_in not in steps and r.blocked_in in _COLLECTIVES
        if silent or elsewhere:
            left.append((r, r.blocked_from or r.first_error if elsewhere else r.last_line))
    if not left or len(left) >= len(reports):
        return
    for r, ev in left[:3]:
        if ev is not None:
            state.signal("rank-left-loop-early", ev.file, Hit(ev.line, ev.text))
    ev = in_step[0].first_error
    if ev is not None:
        state.signal("rank-left-loop-early", ev.file, Hit(ev.line, ev.text))


def _earliest(ranks: list[RankReport]) -> RankReport:
    timed = [r for r in ranks if r._first_epoch is not None]
    if timed:
        return min(timed, key=lambda r: r._first_epoch)
    return min(ranks, key=lambda r: (r.first_error.file, r.first_error.line))


def _merge_flight(reports: dict[int, RankReport], flight) -> None:
    # only what each rank enqueued: gloo's pg_status counts a timed-out collective as completed,
    # so "completed" from a dump would invent stragglers; the flight summary names them instead
    for progress in getattr(flight, "progress", ()) or ():
        rank = getattr(progress, "rank", None)
        if rank is None:
            continue
        r = reports.setdefault(rank, RankReport(rank))
        value = getattr(progress, "last_enqueued", None)
        if isinstance(value, int):
            r.last_enqueued = max(r.last_enqueued or 0, value)


def _judge(reports: dict[int, RankReport], world: int | None, orphans: list[Evidence]) -> list[str]:
    verdict: list[str] = []
    crashed = [r for r in reports.values() if r.error_kind == "crash"]
    waiting = sorted((r for r in reports.values() if r.error_kind in ("timeout", "lost-peer")), key=lambda r: r.rank)
    desync = sorted((r for r in reports.values() if r.error_kind == "desync"), key=lambda r: r.rank)
    for r in crashed:
        r.status = "died"
    for r in waiting:
        r.status = "waiting" if r.error_kind == "timeout" else "lost-peer"
    for r in desync:
        r.status = "desync"
    if desync:
        verdict.append(f"rank{'s' if len(desync) > 1 else ''} {_ranges([r.rank for r in desync])} reported mismatched "
                       f"collectives: {_one_line(desync[0].first_error.text, 120)}")
    if crashed:
        first = _earliest(crashed)
        what = _one_line(first.first_error.text)
        verdict.append(f"rank {first.rank} failed first: {what}")
        if len(crashed) > 1:
            verdict.append("ranks " + _ranges(sorted(r.rank for r in crashed)) + " all raised errors of their own")
        if waiting:
            many = len(waiting) > 1
            verdict.append(f"rank{'s' if many else ''} {_ranges([r.rank for r in waiting])} then timed out or lost "
                           f"{'their peers' if many else 'its peer'}: a consequence, not the cause")
    blocked = {}
    for r in reports.values():
        if r.blocked_in and r.error_kind != "crash":
            blocked.setdefault(r.blocked_in, []).append(r.rank)
    if len(blocked) > 1:
        parts = [f"rank{'s' if len(v) > 1 else ''} {_ranges(sorted(v))} in {k}" for k, v in sorted(blocked.items(), key=lambda kv: min(kv[1]))]
        verdict.append("ranks were blocked in different collectives: " + "; ".join(parts))
    completed = {r.rank: r.last_completed for r in reports.values() if r.last_completed is not None}
    if len(completed) >= 2 and len(set(completed.values())) > 1:
        low, high = min(completed.values()), max(completed.values())
        behind = sorted(rank for rank, c in completed.items() if c == low)
        for rank in behind:
            if reports[rank].status in ("ok", "waiting"):
                reports[rank].status = "behind"
        verdict.append(f"rank{'s' if len(behind) > 1 else ''} {_ranges(behind)} fell behind: "
                       f"last completed collective #{low} while others reached #{high}")
    if any(r.init_complete for r in reports.values()):
        never = sorted(r.rank for r in reports.values() if not r.init_complete and r.sources)
        for rank in never:
            reports[rank].init_complete = False
            if reports[rank].status == "ok":
                reports[rank].status = "no-init"
        if never:
            verdict.append(f"rank{'s' if len(never) > 1 else ''} {_ranges(never)} never printed NCCL Init COMPLETE")
    missing = sorted(r.rank for r in reports.values() if r.status == "missing")
    if missing:
        verdict.append(f"no log line from rank{'s' if len(missing) > 1 else ''} {_ranges(missing)} "
                       f"(world size {world}): those logs may be missing, or the ranks never started")
    if orphans and waiting and not crashed:
        e = orphans[0]
        verdict.append(f"an error that names no rank came first (line {e.line}: {_one_line(e.text, 100)}); "
                       f"rank{'s' if len(waiting) > 1 else ''} {_ranges([r.rank for r in waiting])} then timed out")
    if waiting and not crashed:
        silent = sorted(r.rank for r in reports.values() if r.error_kind is None and r.status not in ("missing", "no-init"))
        if silent:
            verdict.append(f"rank{'s' if len(silent) > 1 else ''} {_ranges(silent)} printed no error "
                           "while the others timed out: the likeliest to have hung or died silently")
    return verdict


def _one_line(text: str, limit: int = 160) -> str:
    body = " ".join(_prefix(text).body.split())
    return body if len(body) <= limit else body[: limit - 1] + "…"


def _ranges(ranks: list[int]) -> str:
    out, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(out)
