"""Read collective-timeout reports: NCCL watchdog and work-status lines, gloo timeouts, monitoredBarrier."""
from __future__ import annotations

from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.kb.record import record

__all__ = ["Watchdog", "parse_watchdog"]


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None



@record(frozen=True)
class Watchdog:
    """One collective-timeout report. Sequence numbers are as printed (-1: none yet)."""

    # nccl_timeout | nccl_async_error | nccl_work_status | nccl_watchdog_stuck | gloo_timeout | monitored_barrier
    kind: str
    backend: str  # nccl | gloo
    rank: int | None = None  # the reporting rank ([Rank 3], [PG 1 Rank 3])
    seq: int | None = None
    op_type: str | None = None  # ALLREDUCE, _ALLGATHER_BASE, COALESCED ...; gloo: recv / send
    numel_in: int | None = None  # None also when torch printed 2**64-1 for "unknown"
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    last_started: int | None = None
    pg_id: int | None = None
    pg_name: str | None = None  # default_pg, or a user-given process-group name
    missing_ranks: tuple[int, ...] = ()  # ranks named by monitoredBarrier as not arriving


_WD_TRIGGERS = (
    "WorkNCCL",
    "aught collective operation timeout",
    "NCCL work",
    "work sequence id",
    "watchdog got stuck",
    "Heartbeat monitor timed out",
    "Timed out waiting",
    "monitoredBarrier",
    "dump signal due to a collective timeout",
)
_RANK_TAG = _lazy(
    r"\[(?:PG (?:ID )?(\d{1,9})(?: PG GUID \d{1,9})? ?(?:\(([^()\]]{0,200})\))? )?Rank (\d{1,7})\]"
)
_WORK_FIELD = _lazy(r"(\w{1,40})=([^,\s]{0,40})")
_RAN_FOR = _lazy(r"\) ran for (\d{1,15}) milliseconds")
_AT_WORK = _lazy(
    r"(?:Timeout at NCCL work|detected by watchdog at work|at work sequence id): ?(-?\d{1,15})"
)
# "Last enqueued NCCL work: 5, last completed NCCL work: 4" (the dump-signal line capitalises the first)
_LAST = _lazy(r"[Ll]ast (enqueued|completed|started) (?:\w{1,12} )?work: ?(-?\d{1,15})")
_STUCK = _lazy(r"watchdog got stuck for (\d{1,9}) seconds")
_GLOO_WAIT = _lazy(r"Timed out waiting (\d{1,12})\s?ms for (recv|send) operation to complete")
_BARRIER_MISS = _lazy(r"Ranks? ((?:\d{1,7}, ?){0,4096}\d{1,7}) failed to pass monitoredBarrier in (\d{1,12}) ms")
_BARRIER_TIMEOUT = _lazy(r"Rank (\d{1,7}) timed out in monitoredBarrier after (\d{1,12}) ms")
_DIGITS = _lazy(r"\d+")
_NUMEL_UNKNOWN = 2**64 - 1  # torch prints size_t(-1) when it does not know


def _numel(text: str | None) -> int | None:
    value = _int(text)
    return None if value is None or value >= _NUMEL_UNKNOWN else value


def parse_watchdog(body: str) -> Watchdog | None:
    """Read an NCCL watchdog / work-status line, a gloo transport timeout or a
    monitoredBarrier failure. Searches anywhere in `body`; never raises."""
    if not any(t in body for t in _WD_TRIGGERS):
        return None
    tag = _RANK_TAG.search(body)
    pg_id, pg_name, rank = (_int(tag.group(1)), tag.group(2), _int(tag.group(3))) if tag else (None, None, None)
    lasts = {k: int(v) for k, v in _LAST.findall(body[:8192])}
    at_work = _AT_WORK.search(body)
    common = {
        "rank": rank,
        "pg_id": pg_id,
        "pg_name": pg_name or None,
        "last_enqueued": lasts.get("enqueued"),
        "last_completed": lasts.get("completed"),
        "last_started": lasts.get("started"),
    }
    seq = int(at_work.group(1)) if at_work else None

    at = body.find("WorkNCCL(")
    window = body[at : at + 1200] if at != -1 else ""
    # "Timeout(ms)" is the one field with parentheses in its name
    inner = window[len("WorkNCCL(") :].replace("Timeout(ms)", "Timeout_ms", 1).split(")", 1)[0]
    fields = dict(_WORK_FIELD.findall(inner))
    ran = _RAN_FOR.search(window)
    # a C++ stack frame "WorkNCCL::WorkNCCL(std::string ...)" names the class but is no report
    if "OpType" in fields or "SeqNum" in fields or ran or "aught collective operation timeout" in body:
        # "Collective WorkNCCL(...) raised the following async exception: NCCL error ..." is a failure, not a timeout
        failed = "raised the following async exception" in window and ran is None
        return Watchdog(
            kind="nccl_async_error" if failed else "nccl_timeout",
            backend="nccl",
            seq=_int(fields.get("SeqNum")) if "SeqNum" in fields else seq,
            op_type=fields.get("OpType") or None,
            numel_in=_numel(fields.get("NumelIn")),
            numel_out=_numel(fields.get("NumelOut")),
            timeout_ms=_int(fields.get("Timeout_ms")),
            ran_ms=_int(ran.group(1)) if ran else None,
            **common,
        )
    if at_work or lasts:
        return Watchdog(kind="nccl_work_status", backend="nccl", seq=seq, **common)
    stuck = _STUCK.search(body)
    if stuck or "Heartbeat monitor timed out" in body:
        timeout = int(stuck.group(1)) * 1000 if stuck else None
        return Watchdog(kind="nccl_watchdog_stuck", backend="nccl", timeout_ms=timeout, **common)
    gloo = _GLOO_WAIT.search(body)
    if gloo:
        return Watchdog(
            kind="gloo_timeout", backend="gloo", op_type=gloo.group(2), timeout_ms=int(gloo.group(1)), **common
        )
    miss = _BARRIER_MISS.search(body) or _BARRIER_TIMEOUT.search(body)
    if miss:
        ranks = tuple(int(r) for r in _DIGITS.findall(miss.group(1)))
        return Watchdog(
            kind="monitored_barrier", backend="gloo", timeout_ms=int(miss.group(2)), missing_ranks=ranks, **common
        )
    return None
