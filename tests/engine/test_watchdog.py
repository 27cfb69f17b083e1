"""Collective-timeout reports: NCCL watchdog and work-status lines, gloo timeouts, monitoredBarrier."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.engine.prefix import parse_prefix
from gpudoctor.engine.watchdog import parse_watchdog

DATA = Path(__file__).resolve().parent.parent / "data" / "lines"


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8", errors="replace").splitlines()


def _body(line: str) -> str:
    return parse_prefix(line).body


def _posted(containing: str) -> str:
    return next(line for line in _lines("posted_formats.txt") if containing in line and not line.startswith("#"))

# --- watchdog ------------------------------------------------------------------


def test_watchdog_example_from_the_brief() -> None:
    w = parse_watchdog(
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, "
        "NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out."
    )
    assert w is not None
    assert (w.kind, w.backend, w.rank, w.seq, w.op_type) == ("nccl_timeout", "nccl", 3, 57, "ALLREDUCE")
    assert (w.numel_in, w.numel_out, w.timeout_ms, w.ran_ms) == (1048576, 1048576, 1800000, 1800093)


@pytest.mark.parametrize(
    ("containing", "expected"),
    [
        (
            "SeqNum=2211",
            {"kind": "nccl_timeout", "rank": 0, "seq": 2211, "numel_in": 271581184, "ran_ms": 600071},
        ),
        (
            "at work: 2211",
            {"kind": "nccl_work_status", "rank": 0, "pg_id": 1, "seq": 2211, "last_enqueued": 2213,
             "last_completed": 2210},
        ),
        (
            "at work: 913",
            {"kind": "nccl_work_status", "rank": 1, "pg_id": 0, "pg_name": "default_pg", "last_enqueued": 916},
        ),
        (
            "Timeout at NCCL work: 7305",
            {"kind": "nccl_work_status", "rank": 4, "pg_id": 3, "seq": 7305, "last_completed": 7304},
        ),
        (
            "work sequence id: 1184302",
            {"kind": "nccl_work_status", "rank": 118, "seq": 1184302, "last_enqueued": 1184417,
             "last_completed": 1184301},
        ),
        (  # torch 1.12: no Numel fields
            "SeqNum=351227",
            {"kind": "nccl_timeout", "rank": 1, "op_type": "ALLREDUCE", "numel_in": None, "timeout_ms": 1800000,
             "ran_ms": 1802940},
        ),
        (
            "_REDUCE_SCATTER_BASE",
            {"op_type": "_REDUCE_SCATTER_BASE", "numel_in": 402653184, "numel_out": 50331648},
        ),
        ("Heartbeat monitor timed out", {"kind": "nccl_watchdog_stuck", "rank": 1, "timeout_ms": None}),
        ("got stuck for 480 seconds", {"kind": "nccl_watchdog_stuck", "rank": 7, "timeout_ms": 480_000}),
        (
            "Rank 1 failed to pass monitoredBarrier",
            {"kind": "monitored_barrier", "backend": "gloo", "rank": 0, "missing_ranks": (1,), "timeout_ms": 2000},
        ),
        (
            "Timed out waiting 2000ms",
            {"kind": "gloo_timeout", "backend": "gloo", "op_type": "recv", "timeout_ms": 2000, "rank": None},
        ),
    ],
)
def test_watchdog_posted_formats(containing: str, expected: dict) -> None:
    w = parse_watchdog(_body(_posted(containing)))
    assert w is not None
    for name, value in expected.items():
        assert getattr(w, name) == value, name


def test_watchdog_in_our_gloo_run() -> None:
    found = [parse_watchdog(_body(line)) for line in _lines("torchrun_gloo_timeout.log")]
    found = [w for w in found if w]
    assert [(w.kind, w.timeout_ms, w.op_type) for w in found] == [("gloo_timeout", 2000, "recv")]
    detail = [w for w in (parse_watchdog(_body(line)) for line in _lines("torchrun_gloo_detail.log")) if w]
    assert detail and all(w.kind == "monitored_barrier" and w.missing_ranks == (1,) for w in detail)


def test_watchdog_variants() -> None:
    unknown = parse_watchdog(
        "[PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=COALESCED, NumelIn=18446744073709551615, "
        "NumelOut=18446744073709551615, Timeout(ms)=1800000) ran for 1800014 milliseconds before timing out."
    )
    assert unknown and (unknown.rank, unknown.pg_id, unknown.numel_in, unknown.op_type) == (5, 3, None, "COALESCED")
    failed = parse_watchdog(
        "Collective WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1000000) raised the "
        "following async exception: NCCL error: unhandled system error"
    )
    assert failed and (failed.kind, failed.seq, failed.ran_ms) == ("nccl_async_error", 2, None)
    old = parse_watchdog(
        "what():  [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, "
        "Timeout(ms)=1800000) ran for 1802691 milliseconds before timing out."
    )
    assert old and (old.seq, old.op_type, old.ran_ms) == (None, "BROADCAST", 1802691)
    started = parse_watchdog("[PG 0 Rank 2] Timeout at NCCL work: 9, last enqueued NCCL work: 11, "
                             "last started NCCL work: 10, last completed NCCL work: 8.")
    assert started and (started.last_started, started.last_enqueued, started.last_completed) == (10, 11, 8)
    barrier = parse_watchdog("[Rank 0]: Ranks 1, 3, 5 failed to pass monitoredBarrier in 30000 ms")
    assert barrier and barrier.missing_ranks == (1, 3, 5)
    never = parse_watchdog(
        "[PG 0 Rank 1] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: -1."
    )
    assert never and never.last_completed == -1


@pytest.mark.parametrize(
    "body",
    [
        "",
        "Watchdog",
        "loss=2.3 step=10",
        "Some NCCL operations have failed or timed out.",
        "WorkNCCL",
        "frame #3: c10d::ProcessGroupNCCL::WorkNCCL::WorkNCCL(std::string const&, c10::Device&, int) + 0x1f",
    ],
)
def test_not_a_watchdog(body: str) -> None:
    assert parse_watchdog(body) is None


# --- tracebacks ------------------------------------------------------------------



@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.sampled_from(["WorkNCCL(SeqNum=", "Timed out waiting ", "monitoredBarrier",
                                                         "last enqueued work: ", "watchdog got stuck for "])
                 .flatmap(lambda s: st.text(max_size=60).map(lambda t: s + t))))
def test_parse_watchdog_never_raises(body: str) -> None:
    parse_watchdog(body)


# torch 2.4+ (ProcessGroupNCCL.cpp getNCCLWatchdogTimeoutErrorMsg): a rank told of a peer's timeout prints only this
_DUMP = ("{rank_tag} Received a dump signal due to a collective timeout from {source} and we will try our best to dump "
         "the debug info. Last enqueued {backend} work: {enq}, last completed {backend} work: {done}.This is most likely "
         "caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of collectives is "
         "not same for all ranks or the scheduled collective, for some reason, didn't run.")


@pytest.mark.parametrize("backend", ["NCCL", "nccl"])
def test_dump_signal_line_reads_as_a_timeout_report(backend: str) -> None:
    body = _DUMP.format(rank_tag="[PG ID 0 PG GUID 0(default_pg) Rank 5]", source=" rank 7", backend=backend,
                        enq=56116, done=56115)
    wd = parse_watchdog(body)
    assert wd is not None and wd.backend == "nccl"
    assert (wd.rank, wd.pg_id, wd.last_enqueued, wd.last_completed) == (5, 0, 56116, 56115)


def test_dump_signal_lines_alone_give_the_ranks_their_counters() -> None:
    from gpudoctor.engine.diagnose import diagnose
    from gpudoctor.engine.sources import resolve
    from gpudoctor.kb.catalog import load_catalog
    import tempfile

    lines = [
        f"[rank{r}]:[E813 12:25:31.213133402 ProcessGroupNCCL.cpp:1746] "
        + _DUMP.format(rank_tag=f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]", source=src, backend="NCCL",
                       enq=593, done=done)
        for r, src, done in ((0, "this local rank", 592), (1, " rank 0", 593))
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dump.log"
        path.write_text("\n".join(lines) + "\n")
        result = diagnose(load_catalog(), resolve([str(path)]), use_hyperscan=False)
    counters = {r.rank: (r.last_completed, r.last_enqueued) for r in result.ranks}
    assert counters == {0: (592, 593), 1: (593, 593)}


def test_torch_1_8_caught_timeout_for_work() -> None:
    # torch 1.7-1.8 ProcessGroupNCCL.cpp WorkNCCL::synchronizeInternal: "[Rank " << rank_ << "] Caught collective
    # operation timeout for work: " << (*this), then throws "Operation timed out!"
    wd = parse_watchdog("[Rank 1] Caught collective operation timeout for work: WorkNCCL(OpType=ALLREDUCE, "
                        "TensorShape=[1024], Timeout(ms)=1800000)")
    assert wd is not None and (wd.kind, wd.rank, wd.op_type, wd.timeout_ms) == ("nccl_timeout", 1, "ALLREDUCE", 1800000)
    from gpudoctor.engine.patterns import STRUCTURAL
    import re

    assert re.search(STRUCTURAL["watchdog"][0], "[Rank 1] Caught collective operation timeout for work: WorkNCCL(")


def test_torch_1_8_aborted_communicators_line_is_a_lost_peer() -> None:
    """torch 1.8-1.11 ProcessGroupNCCL: a rank that finds a peer's NCCLABORTEDCOMM key in the store says so and aborts
    its own communicators: it is waiting on the rank that failed, not failing itself."""
    import re

    from gpudoctor.engine.patterns import STRUCTURAL
    from gpudoctor.engine.ranks import classify

    aborted = ("[Rank 1] Found key in store: NCCLABORTEDCOMM:3a7f, from rank: 0. This means that rank has aborted its "
               "NCCL communicators previously and is not in a healthy state.. Aborting appropriate communicators")
    regex, literals = STRUCTURAL["lost-peer"]
    assert re.search(regex, aborted) and any(lit in aborted for lit in literals)
    assert classify(aborted) == "lost-peer"
    assert classify("RuntimeError: NCCL error: unhandled system error, NCCL version 2.7.8") == "crash"
