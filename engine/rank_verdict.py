"""The cross-rank judgement once every source is read: derived signals (who failed first, who waited, who left the
loop early) and the verdict sentences."""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.gating import is_gated_function, is_rank0_branch
from gpudoctor.engine.rank_model import COLLECTIVES, STEP_COLLECTIVES, RankReport, RankState
from gpudoctor.engine.scan import Hit

def derive(state: RankState) -> None:
    reports = state.reports.values()
    # a rank stopped by hand (Ctrl-C) inside a collective had been waiting there
    waiting = [r for r in reports if r.error_kind in ("timeout", "lost-peer", "desync")
               or (r.error_kind == "interrupted" and r.blocked_in)]
    crashed = [r for r in reports if r.error_kind == "crash"]
    others_waited = bool(waiting or state.signals.get("collective-timeout") or state.signals.get("lost-peer"))
    if others_waited:
        state.signals.setdefault("ranks-waiting", list(state.signals.get("collective-timeout", []))
                                 + list(state.signals.get("lost-peer", []))[:6]
                                 + [(r.first_error.file, Hit(r.first_error.line, r.first_error.text))
                                    for r in waiting if r.error_kind == "interrupted"][:6])
    elif state.signals.get("run-interrupted") and not crashed and not state.orphan_crashes:
        # nothing failed and the run was stopped by hand: it had stopped moving (or its user gave up on it)
        state.signals.setdefault("ranks-waiting", list(state.signals["run-interrupted"])[:6])
    if crashed and others_waited:
        first = _earliest(crashed)
        state.signal("rank-failed-first", first.first_error.file, Hit(first.first_error.line, first.first_error.text))
    elif state.orphan_crashes and waiting:
        # a crash no rank prefix claims (a plain `python` per rank, a worker thread) before ranks timed out
        first = min(state.orphan_crashes, key=lambda e: (e.file, e.line))
        state.signal("rank-failed-first", first.file, Hit(first.line, first.text))
    blocked = {}
    for r in reports:
        if r.blocked_in and r.error_kind in ("timeout", "lost-peer", "desync", "interrupted", None):
            blocked.setdefault(r.blocked_in, []).append(r)
    if len(blocked) > 1:
        for name, ranks in blocked.items():
            ev = ranks[0].first_error or ranks[0].blocked_from
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
            # (but not rank 0 alone in the backward pass: every rank runs that one, the others went elsewhere)
            rank0_alone = len(smallest) == 1 and r.rank == 0 and r.blocked_in != "backward"
            if gated_name or rank0_alone:
                ev = caller or r.first_error
                if ev is not None:
                    state.signal("collective-in-gated-path", ev.file, Hit(ev.line, ev.text))

    _same_seq_different_work(state)
    _seq_apart(state)
    _left_loop_early(state)


def _same_seq_different_work(state: RankState) -> None:
    """Watchdogs that timed out on the same process group's same SeqNum but name another OpType or other element
    counts (WorkNCCL(SeqNum=, OpType=, NumelIn=, NumelOut=)): the ranks had issued different collectives as their
    n-th, so each waits for a partner that is elsewhere. Coalesced work is left out (its counts are per batch)."""
    by_seq: dict[tuple, dict[tuple, RankReport]] = {}
    for r in state.reports.values():
        work = r.timed_out_work
        if work is None or r.timed_out_line is None or "COALESCED" in work[2]:
            continue
        pg, seq, op, numel_in, numel_out = work
        if seq < 1:
            continue
        by_seq.setdefault((pg, seq), {}).setdefault((op, numel_in, numel_out), r)
    for kinds in by_seq.values():
        if len(kinds) > 1:
            for r in list(kinds.values())[:4]:
                ev = r.timed_out_line
                state.signal("ranks-in-different-collectives", ev.file, Hit(ev.line, ev.text))


SEQ_APART_MAX = 64  # further apart than this, two SeqNums are more likely two process groups' counters (no PG id)


def _seq_apart(state: RankState) -> None:
    """Watchdogs of one process group that timed out at different SeqNums a few apart (rank 0 at 7559, rank 1 at
    7561): a rank's works complete in order, so the one at the higher number finished collectives the other never
    reached. The ranks had issued different numbers of collectives, which is a desync; the survivors of a crashed
    rank all wait at the same number. Logs without a PG id count as one group unless their numbers lie far apart."""
    by_pg: dict = {}
    for r in state.reports.values():
        work = r.timed_out_work
        if work is None or r.timed_out_line is None or "COALESCED" in work[2] or work[1] < 1:
            continue
        by_pg.setdefault(work[0], []).append(r)
    for ranks in by_pg.values():
        seqs = {r.timed_out_work[1] for r in ranks}
        if len(seqs) > 1 and max(seqs) - min(seqs) <= SEQ_APART_MAX:
            for r in ranks[:4]:
                ev = r.timed_out_line
                state.signal("ranks-in-different-collectives", ev.file, Hit(ev.line, ev.text))


def _left_loop_early(state: RankState) -> None:
    """A rank left the training loop while the others timed out inside a step: its log ends without an error
    of its own, or it waits in a collective (a barrier, say) that the step does not call."""
    reports = list(state.reports.values())
    in_step = [r for r in reports if r.error_kind == "timeout" and r.blocked_in in STEP_COLLECTIVES]
    if not in_step or any(r.error_kind == "crash" for r in reports):
        return  # nobody was caught inside a step, or a rank's own crash explains the wait
    steps = {r.blocked_in for r in in_step}
    left = []
    for r in reports:
        if r in in_step or r.status == "missing":
            continue
        silent = r.error_kind is None and r.sources and r.last_line is not None and r.init_complete is not False
        elsewhere = r.blocked_in is not None and r.blocked_in not in steps and r.blocked_in in COLLECTIVES
        # it never timed out, yet lost the peer that timed out waiting for it: it was not in that collective, and
        # only heard of the others when they gave up (gloo: "Connection closed by peer" after the peer's recv timeout)
        outlived = r.error_kind == "lost-peer" and r.timed_out_in is None and r.first_error is not None and all(
            o.first_error.file == r.first_error.file and o.first_error.line < r.first_error.line for o in in_step)
        if silent or elsewhere or outlived:
            left.append((r, r.blocked_from or r.first_error if elsewhere else
                         r.first_error if outlived else r.last_line))
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


def merge_flight(reports: dict[int, RankReport], flight) -> None:
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


def judge(reports: dict[int, RankReport], world: int | None, orphans: list[Evidence]) -> list[str]:
    verdict: list[str] = []
    crashed = [r for r in reports.values() if r.error_kind == "crash"]
    waiting = sorted((r for r in reports.values() if r.error_kind in ("timeout", "lost-peer")), key=lambda r: r.rank)
    desync = sorted((r for r in reports.values() if r.error_kind == "desync"), key=lambda r: r.rank)
    stopped = sorted(r.rank for r in reports.values() if r.error_kind == "interrupted")
    for r in crashed:
        r.status = "died"
    for r in waiting:
        r.status = "waiting" if r.error_kind == "timeout" else "lost-peer"
    for rank in stopped:
        reports[rank].status = "stopped"
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
    if stopped:
        where = ", ".join(f"rank {r.rank} was waiting in {r.blocked_in}" for r in (reports[k] for k in stopped)
                          if r.blocked_in)
        verdict.append(f"rank{'s' if len(stopped) > 1 else ''} {_ranges(stopped)} "
                       f"{'were' if len(stopped) > 1 else 'was'} stopped by hand (KeyboardInterrupt)"
                       + (f"; {where}" if where else ""))
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
        if silent and all(r.error_kind == "lost-peer" for r in waiting):
            # the others lost the connection to it: it did not hang, it left (finished early, or died without a word)
            verdict.append(f"rank{'s' if len(silent) > 1 else ''} {_ranges(silent)} printed no error and left while "
                           "the others still waited for it: it ended early (finished its loop, or died without a "
                           "word)")
        elif silent:
            verdict.append(f"rank{'s' if len(silent) > 1 else ''} {_ranges(silent)} printed no error "
                           "while the others timed out: the likeliest to have hung or died silently")
    return verdict


def _one_line(text: str, limit: int = 160) -> str:
    from gpudoctor.engine.prefix import parse_hit_prefix

    body = " ".join(parse_hit_prefix(text).body.split())
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
