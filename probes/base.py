"""What a probe is and what it returns: the Probe declaration and the frozen Result with its five outcomes."""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

# What a probe may need before it can say anything; the runner checks the cheap ones itself.
NEEDS = {
    "torch": "PyTorch installed in this environment",
    "cuda": "an NVIDIA driver and GPUs",
    "nccl": "a CUDA build of torch with NCCL",
    "gpus": "two or more GPUs",
    "root": "root privileges",
    "peer": "a peer host (--peer HOST)",
}


class Status(str, enum.Enum):
    """Confirmed: the probe found the problem. RuledOut: it looked and found none."""

    CONFIRMED = "confirmed"
    RULED_OUT = "ruled_out"
    INCONCLUSIVE = "inconclusive"
    SKIPPED = "skipped"
    ERRORED = "errored"


@dataclass(frozen=True)
class Probe:
    """A probe's declaration: the runner imports `target` ("module:function") in a child process."""

    id: str
    title: str
    target: str
    timeout_s: float = 20.0
    needs: tuple[str, ...] = ()
    # under a launcher: "job" runs on every rank and gathers to rank 0 itself, "node" on local rank 0
    # of each node, "once" on global rank 0 only
    scope: str = "node"

    def __post_init__(self):
        if self.scope not in ("job", "node", "once"):
            raise ValueError(f"probe {self.id}: unknown scope {self.scope!r}")
        unknown = set(self.needs) - set(NEEDS)
        if unknown:
            raise ValueError(f"probe {self.id}: unknown needs {sorted(unknown)}")


@dataclass(frozen=True)
class Result:
    """One probe's outcome. `entries` names the catalogue entries this outcome speaks to."""

    status: Status
    summary: str
    evidence: tuple[str, ...] = ()
    figures: Mapping[str, Any] = field(default_factory=dict)
    entries: tuple[str, ...] = ()
    probe: str = ""
    duration_s: float = 0.0

    @property
    def problem(self) -> bool:
        """A confirmed problem or a probe that could not run: both fail a check."""
        return self.status in (Status.CONFIRMED, Status.ERRORED)

    def to_dict(self) -> dict:
        return {
            "probe": self.probe,
            "status": self.status.value,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "figures": dict(self.figures),
            "entries": list(self.entries),
            "duration_s": round(self.duration_s, 3),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Result":
        return cls(
            status=Status(data["status"]),
            summary=str(data.get("summary", "")),
            evidence=tuple(str(e) for e in data.get("evidence", ())),
            figures=dict(data.get("figures", {})),
            entries=tuple(data.get("entries", ())),
            probe=str(data.get("probe", "")),
            duration_s=float(data.get("duration_s", 0.0)),
        )

    def with_run(self, probe: str, duration_s: float) -> "Result":
        return replace(self, probe=probe, duration_s=duration_s)


def entry_ids(ids) -> tuple[str, ...]:
    """Distinct entry ids in catalogue order: D6 before D16, D before MN."""
    def key(entry: str):
        m = re.match(r"([A-Za-z]+)([0-9]*)", entry)
        return (m.group(1), int(m.group(2) or 0)) if m else (entry, 0)

    return tuple(sorted({e for e in ids if e}, key=key))


def confirmed(summary: str, evidence=(), figures=None, entries=()) -> Result:
    return Result(Status.CONFIRMED, summary, tuple(evidence), dict(figures or {}), tuple(entries))


def ruled_out(summary: str, evidence=(), figures=None, entries=()) -> Result:
    return Result(Status.RULED_OUT, summary, tuple(evidence), dict(figures or {}), tuple(entries))


def inconclusive(summary: str, evidence=(), figures=None, entries=()) -> Result:
    return Result(Status.INCONCLUSIVE, summary, tuple(evidence), dict(figures or {}), tuple(entries))


def skipped(reason: str, evidence=(), figures=None) -> Result:
    return Result(Status.SKIPPED, reason, tuple(evidence), dict(figures or {}))


def errored(message: str, evidence=(), figures=None) -> Result:
    return Result(Status.ERRORED, message, tuple(evidence), dict(figures or {}))
