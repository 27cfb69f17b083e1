"""The multi-node first-move checklist (multinode.md), one row per step, from the probes' results and the env."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from gpudoctor.probes.base import Result, Status


@dataclass(frozen=True)
class Step:
    entries: str  # "MN2,MN3": the catalogue entries the step guards against
    word: str  # pass / fail / warn / skip
    reason: str

    @property
    def failed(self) -> bool:
        return self.word == "fail"

    def to_dict(self) -> dict:
        return {"entries": self.entries.split(","), "status": self.word, "reason": self.reason}


_FROM_STATUS = {Status.RULED_OUT: "pass", Status.CONFIRMED: "fail", Status.INCONCLUSIVE: "warn",
                Status.SKIPPED: "skip", Status.ERRORED: "fail"}


def first_moves(results: Mapping[str, Result], env: Mapping[str, str], multi_node: bool) -> list[Step]:
    steps = [
        _from_probe(results.get("fabric"), "MN1"),
        _nccl_env(env),
        _from_probe(results.get("mtu"), "MN4"),
        _first_launch(env, results.get("timeouts")),
        _from_probe(results.get("ckptdir"), "MN7"),
        Step("MN5,MN6", "skip", "manual: script must load the latest checkpoint on restart"),
    ]
    if multi_node:
        return steps
    # On one node none of this is in play (multinode.md: single-box users skip it); the heading says so.
    return [s if s.word in ("pass", "skip") else Step(s.entries, "skip", s.reason) for s in steps]


def _from_probe(result: Result | None, entries: str) -> Step:
    if result is None:
        return Step(entries, "skip", "probe not run")
    return Step(entries, _FROM_STATUS[result.status], result.summary)


def _nccl_env(env: Mapping[str, str]) -> Step:
    missing = []
    if not env.get("NCCL_SOCKET_IFNAME"):
        missing.append("NCCL_SOCKET_IFNAME")
    if not env.get("NCCL_IB_HCA") and env.get("NCCL_IB_DISABLE") != "1":
        missing.append("NCCL_IB_HCA or NCCL_IB_DISABLE=1")
    if missing:
        return Step("MN2,MN3", "fail", "unset: " + ", ".join(missing))
    pinned = f"NCCL_SOCKET_IFNAME={env['NCCL_SOCKET_IFNAME']}, " + (
        f"NCCL_IB_HCA={env['NCCL_IB_HCA']}" if env.get("NCCL_IB_HCA") else "NCCL_IB_DISABLE=1")
    return Step("MN2,MN3", "pass", pinned + " here; keep them identical on every rank")


def _first_launch(env: Mapping[str, str], timeouts: Result | None) -> Step:
    level = env.get("NCCL_DEBUG", "").upper()
    mode = (timeouts.figures.get("async_error_handling") if timeouts else None)
    if mode == 0:
        return Step("MN2,MN3", "fail", "TORCH_NCCL_ASYNC_ERROR_HANDLING=0: a dead rank hangs the others")
    if level not in ("INFO", "TRACE", "WARN"):
        return Step("MN2,MN3", "fail", "set NCCL_DEBUG=INFO for the first launch (names each NIC)")
    return Step("MN2,MN3", "pass", f"NCCL_DEBUG={level}; async error handling "
                                   f"{mode if mode is not None else 'default'}")
