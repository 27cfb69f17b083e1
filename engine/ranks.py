"""Follow each rank through the logs and name the one that fell behind or died first."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.patterns import STRUCT, PatternSet

_INIT_RANK = re.compile(r"\brank (\d+) nranks (\d+)\b")
_TIMEOUT_WORDS = ("Watchdog caught", "timed out", "Timed out", "Timeout", "timeout")


@dataclass
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
    error_kind: str | None = None  # "crash" (its own error) or "timeout" (waiting on others)
    status: str = "ok"  # ok | died | behind | waiting | missing | no-init


def _rank_of(text: str, hint: int | None) -> int | None:
    from gpudoctor.engine.lines import parse_prefix

    rank = parse_prefix(text).rank
    return rank if rank is not None else hint


def _is_timeout(text: str) -> bool:
    return any(w in text for w in _TIMEOUT_WORDS)


def analyze_ranks(scans, patterns: PatternSet, flight=None) -> tuple[list[RankReport], list[str]]:
    """Per-rank reports (sorted by rank) and verdict sentences; empty when the logs name no ranks."""
    from gpudoctor.engine.lines import parse_prefix
    from gpudoctor.engine.structure import parse_watchdog

    by_index = {p.name: p.index for p in patterns.patterns if p.owner == STRUCT}
    reports: dict[int, RankReport] = {}
    world = None

    def report(rank: int) -> RankReport:
        if rank not in reports:
            reports[rank] = RankReport(rank)
        return reports[rank]

    for source, scan in scans:
        hint = source.rank_hint
        if hint is None and source.local_rank_hint is not None:
            hint = source.local_rank_hint
        # NCCL's "rank 3 nranks 8 ... Init COMPLETE" names the rank of a per-process debug file
        init_hits = scan.hits.get(by_index["init-complete"])
        if init_hits:
            for hit in init_hits.all():
                m = _INIT_RANK.search(hit.text)
                if m:
                    world = max(world or 0, int(m.group(2)))
                    rank = _rank_of(hit.text, None)
                    rank = int(m.group(1)) if rank is None else rank
                    if hint is None and len({_INIT_RANK.search(h.text).group(1) for h in init_hits.all() if _INIT_RANK.search(h.text)}) == 1:
                        hint = rank
                    report(rank).init_complete = True
        seen_here: set[int] = set()
        for name in ("watchdog", "gloo-timeout", "exception", "signal", "nccl-warn", "mismatch"):
            hits = scan.hits.get(by_index[name])
            if not hits:
                continue
            for hit in hits.all():
                rank = _rank_of(hit.text, hint)
                if rank is None:
                    continue
                seen_here.add(rank)
                r = report(rank)
                body = parse_prefix(hit.text).body
                if name == "watchdog":
                    wd = parse_watchdog(body)
                    if wd is not None:
                        if wd.last_enqueued is not None:
                            r.last_enqueued = max(r.last_enqueued or 0, wd.last_enqueued)
                        if wd.last_completed is not None:
                            r.last_completed = max(r.last_completed or 0, wd.last_completed)
                        if wd.seq is not None and r.timed_out_in is None:
                            r.timed_out_in = f"{wd.op_type or 'collective'} #{wd.seq}"
                            if r.last_completed is None:
                                r.last_completed = wd.seq - 1
                if name in ("exception", "signal", "watchdog", "gloo-timeout", "mismatch") and r.first_error is None:
                    r.first_error = Evidence(scan.name, hit.line_no, hit.text, name)
                    r.error_kind = "timeout" if name in ("watchdog", "gloo-timeout") or _is_timeout(body) else "crash"
        if hint is not None:
            seen_here.add(hint)
        for rank in seen_here:
            r = report(rank)
            if scan.name not in r.sources:
                r.sources.append(scan.name)
        # the last line of a per-rank file is that rank's last word
        if hint is not None and scan.tail:
            line_no, text = scan.tail[-1]
            r = report(hint)
            r.last_line = Evidence(scan.name, line_no, text, "last-line")
            r.last_time = parse_prefix(text).timestamp
        elif scan.tail:
            for line_no, text in scan.tail:
                rank = _rank_of(text, None)
                if rank is not None and rank in reports:
                    reports[rank].last_line = Evidence(scan.name, line_no, text, "last-line")
                    reports[rank].last_time = parse_prefix(text).timestamp

    if flight is not None:
        _merge_flight(reports, flight)
    if world:
        for rank in range(world):
            if rank not in reports and len(reports) > 1:
                reports[rank] = RankReport(rank, status="missing")
    if len(reports) < 2 and not any(r.first_error for r in reports.values()):
        return sorted(reports.values(), key=lambda r: r.rank), []
    verdict = _judge(reports, world)
    return sorted(reports.values(), key=lambda r: r.rank), verdict


def _merge_flight(reports: dict[int, RankReport], flight) -> None:
    for rank, state in getattr(flight, "per_rank", {}).items() if isinstance(getattr(flight, "per_rank", None), dict) else []:
        r = reports.setdefault(rank, RankReport(rank))
        enq = getattr(state, "last_enqueued", None)
        done = getattr(state, "last_completed", None)
        if enq is not None:
            r.last_enqueued = max(r.last_enqueued or 0, enq)
        if done is not None:
            r.last_completed = max(r.last_completed or 0, done)


def _judge(reports: dict[int, RankReport], world: int | None) -> list[str]:
    verdict: list[str] = []
    crashed = [r for r in reports.values() if r.error_kind == "crash"]
    waiting = [r for r in reports.values() if r.error_kind == "timeout"]
    for r in crashed:
        r.status = "died"
    for r in waiting:
        r.status = "waiting"
    if crashed:
        first = min(crashed, key=lambda r: (r.first_error.file, r.first_error.line) if r.last_time is None else (0, 0))
        ordered = sorted(crashed, key=lambda r: r.rank)
        names = ", ".join(str(r.rank) for r in ordered)
        what = first.first_error.text.strip()
        verdict.append(f"rank {first.rank} failed first: {what[:160]}" if len(crashed) == 1
                       else f"ranks {names} failed; first seen: rank {first.rank}: {what[:140]}")
        if waiting:
            verdict.append("ranks " + ", ".join(str(r.rank) for r in sorted(waiting, key=lambda r: r.rank))
                           + " then timed out waiting for it: the timeout is a consequence, not the cause")
    completed = {r.rank: r.last_completed for r in reports.values() if r.last_completed is not None}
    if len(completed) >= 2 and len(set(completed.values())) > 1:
        low = min(completed.values())
        high = max(completed.values())
        behind = sorted(rank for rank, c in completed.items() if c == low)
        for rank in behind:
            if reports[rank].status == "ok":
                reports[rank].status = "behind"
        verdict.append(f"rank{'s' if len(behind) > 1 else ''} {', '.join(map(str, behind))} fell behind: "
                       f"last completed collective #{low} while others reached #{high}")
    inited = [r for r in reports.values() if r.init_complete]
    if inited:
        never = sorted(r.rank for r in reports.values() if not r.init_complete and r.sources)
        for rank in never:
            reports[rank].init_complete = False
            if reports[rank].status == "ok":
                reports[rank].status = "no-init"
        if never:
            verdict.append(f"rank{'s' if len(never) > 1 else ''} {', '.join(map(str, never))} never printed NCCL Init COMPLETE")
    missing = sorted(r.rank for r in reports.values() if r.status == "missing")
    if missing:
        verdict.append(f"no log line from rank{'s' if len(missing) > 1 else ''} {_ranges(missing)} "
                       f"(world size {world}): those logs may be missing, or the ranks never started")
    if waiting and not crashed:
        silent = sorted(r.rank for r in reports.values() if r.error_kind is None and r.status not in ("missing",))
        if silent:
            verdict.append(f"rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} printed no timeout "
                           "while the others did: the likeliest to have hung or died silently")
    return verdict


def _ranges(ranks: list[int]) -> str:
    out, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(out)
