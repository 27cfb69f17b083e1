"""One run of several probes, here or on every rank of a launched job, ending in one report on rank 0."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Mapping

from gpudoctor.probes import hostinfo, runner
from gpudoctor.probes.base import Probe, Result, confirmed, skipped

REPORT_TIMEOUT_S = 60.0  # how long rank 0 waits for the other ranks' reports after its own probes finish
MIN_REPORT_WAIT_S = 5.0  # the least it waits when --timeout asks for less
ELSEWHERE = "runs on another rank of this job"


@dataclass
class Report:
    results: list[Result]
    job: hostinfo.Job | None = None
    prints: bool = True  # False on the ranks other than 0: they ran, rank 0 speaks for them
    missing_ranks: list[int] = field(default_factory=list)
    node_rows: list[tuple[str, Result]] = field(default_factory=list)  # (host, result) where a node differs


def run(probes: list[Probe], options: Mapping, parallel: int = 4, timeout_s: float | None = None,
        on_done: Callable[[Result], None] | None = None, env: Mapping[str, str] | None = None) -> Report:
    env = os.environ if env is None else env
    job = hostinfo.job_from_env(env) if options.get("env") is None else None
    if job is None or job.world_size < 1 or not 0 <= job.rank < job.world_size:
        # no job, or one no process group can form (RANK=3 of WORLD_SIZE=2): the probes run here alone, and the env
        # probe says what is wrong at once instead of waiting out a store no rank will ever meet at
        return Report(runner.run_probes(probes, options, parallel, timeout_s, on_done))
    # c10d's store warnings, errors and C++ traces would land inside the report; the probes report failures themselves
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    from gpudoctor.probes import ranks

    try:
        ranks.host_job_store(job)
    except Exception:  # the port is taken or unreachable: the probes that need the store report that themselves
        pass
    prefix = f"gpudoctor/{os.environ.get('TORCHELASTIC_RUN_ID', 'job')}/{job.restart}"
    mine: list[Probe] = []
    per_probe: dict[str, dict] = {}
    for probe in probes:
        if probe.scope == "job" or (probe.scope == "node" and job.local_rank == 0) or (
                probe.scope == "once" and job.rank == 0):
            mine.append(probe)
            per_probe[probe.id] = dict(options, store_prefix=f"{prefix}/{probe.id}")
    done = runner.run_probes(mine, options, parallel, timeout_s, on_done if job.rank == 0 else None,
                             options_for=lambda p: per_probe[p.id])
    ran = {r.probe: r for r in done}
    results = [ran.get(p.id) or skipped(ELSEWHERE).with_run(p.id, 0.0) for p in probes]
    report = Report(results, job, prints=job.rank == 0)
    _exchange(report, job, prefix, report_wait(timeout_s))
    return report


def report_wait(timeout_s: float | None) -> float:
    """How long rank 0 waits for the other ranks' reports: --timeout bounds it too."""
    return REPORT_TIMEOUT_S if timeout_s is None else max(MIN_REPORT_WAIT_S, min(REPORT_TIMEOUT_S, timeout_s))


def job_notice(job: hostinfo.Job | None, timeout_s: float | None) -> str | None:
    """What rank 0 says before it starts, when the environment makes this run one rank of a job."""
    if job is None or job.rank != 0 or job.world_size < 2:
        return None
    others = "rank 1" if job.world_size == 2 else f"ranks 1-{job.world_size - 1}"
    return (f"RANK=0 of WORLD_SIZE={job.world_size} in the environment: these probes run as rank 0 of a job; "
            f"{others} must run them too (waiting up to {report_wait(timeout_s):.0f} s for their reports)")


def _exchange(report: Report, job: hostinfo.Job, prefix: str, wait_s: float = REPORT_TIMEOUT_S) -> None:
    """Every rank posts its results; rank 0 reads them all and keeps the node probes whose verdict differs."""
    from gpudoctor.probes import ranks

    try:
        store = ranks.connect_job_store(job, f"{prefix}/report", wait_s)
        ranks.post_json(store, str(job.rank), {"host": hostinfo.hostname(), "local_rank": job.local_rank,
                                              "results": [r.to_dict() for r in report.results]})
        if job.rank != 0:
            return
        keys = [str(r) for r in range(1, job.world_size)]
        found, missing = ranks.collect_json(store, keys, wait_s)
    except Exception as exc:  # rank 0 still prints its own view
        if job.rank != 0:  # nobody will print this rank's results: it speaks for itself, and says why
            report.prints = True
            why = _unreachable(job.master_addr)
            stalled = isinstance(exc, ranks.StoreNotAnswering) and not why  # a name that resolves, then silence
            report.results.append(confirmed(
                f"rank {job.rank} cannot reach {job.master_addr}:{job.master_port}: "
                + ("the name does not resolve" if why else "it accepts but never answers" if stalled else "no answer"),
                (f"this rank's report for rank 0 could not be delivered: {why or f'{type(exc).__name__}: {exc}'}",
                 "MASTER_ADDR and MASTER_PORT must name rank 0's host and a port it listens on, the same on "
                 "every node"), entries=("D4",) if stalled else ("D2",)).with_run("report", 0.0))
            return
        report.missing_ranks = list(range(1, job.world_size))
        said = str(exc).splitlines()[0][:160] if str(exc) else ""
        report.results.append(skipped(f"could not gather the other ranks' reports: {type(exc).__name__}"
                                      + (f": {said}" if said else "")).with_run("gather", 0.0))
        return
    report.missing_ranks = [int(k) for k in missing]
    mine = {r.probe: r for r in report.results}
    for key, data in found.items():
        if data.get("local_rank") != 0:
            continue  # node probes run on local rank 0; the other ranks' job probes are in rank 0's result
        for result in (Result.from_dict(d) for d in data["results"]):
            own = mine.get(result.probe)
            if own is not None and result.status != own.status and result.summary != ELSEWHERE:
                report.node_rows.append((data.get("host", f"rank {key}"), result))


def _unreachable(host: str) -> str | None:
    """Why a host name cannot be used, when it does not resolve."""
    import socket

    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError) as exc:
        return f"{host}: {exc.strerror or exc}" if isinstance(exc, OSError) else f"{host}: {exc}"
    return None
