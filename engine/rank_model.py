"""What the cross-rank analysis knows of each rank: its report, the analysis state, and the collectives' names."""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.scan import Hit
from gpudoctor.kb.record import field, record

COLLECTIVES = {
    "barrier", "monitored_barrier", "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor",
    "broadcast", "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather",
    "gather_object", "scatter", "scatter_object_list", "all_to_all", "all_to_all_single", "send", "recv",
}
# what a training step blocks in: a rank that timed out here was still training
STEP_COLLECTIVES = {"backward", "all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather",
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
    # (process group, SeqNum, OpType, NumelIn, NumelOut) of the work its watchdog reported timed out, and that line
    timed_out_work: tuple | None = None
    timed_out_line: Evidence | None = None
    init_complete: bool | None = None
    first_error: Evidence | None = None
    error_kind: str | None = None  # crash (its own error), timeout (waiting on others), lost-peer, desync, interrupted
    blocked_in: str | None = None  # the collective its traceback ends in: "barrier", "backward"
    blocked_from: Evidence | None = None  # the user frame that called it
    status: str = "ok"  # ok | died | behind | waiting | lost-peer | stopped (by hand) | missing | no-init
    _caller_source: str | None = field(default=None, repr=False)  # the code line of blocked_from
    _first_epoch: float | None = field(default=None, repr=False)


@record
class RankState:
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
