"""Frozen results of fix planning: file edits with their diffs, planned fixes, the plan."""
from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass

SAFETY_ORDER = ("safe", "unsafe", "display-only")


def sha256_text(text: str | None) -> str:
    """The hash of a file's bytes as planning read them; "" stands for a file that does not exist yet."""
    if text is None:
        return ""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def unified_diff(path: str, before: str, after: str) -> str:
    """A unified diff with a/ b/ headers; a missing final newline is marked as diff(1) does."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    lines = []
    name = path.lstrip("/")
    for line in difflib.unified_diff(a, b, f"a/{name}" if before else "/dev/null", f"b/{name}", n=3):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        lines.append(line)
    return "".join(lines)


@dataclass(frozen=True)
class FileEdit:
    """One file's whole text before and after; before_sha256 "" means the file is to be created."""

    path: str
    before_sha256: str
    before: str
    after: str

    def diff(self) -> str:
        return unified_diff(self.path, self.before, self.after)

    @property
    def creates(self) -> bool:
        return self.before_sha256 == ""


@dataclass(frozen=True)
class PlannedFix:
    entry_id: str
    action_id: str
    kind: str  # env | command | patch | config
    safety: str  # safe | unsafe | display-only
    title: str
    why: str  # why it is unsafe / display-only, or what it does
    edits: tuple[FileEdit, ...] = ()
    commands: tuple[str, ...] = ()  # rewritten launch commands to run
    env: tuple[tuple[str, str], ...] = ()  # variables to export
    notes: tuple[str, ...] = ()  # what the planner could not fill in or chose for the user

    def diff(self) -> str:
        return "".join(e.diff() for e in self.edits)


@dataclass(frozen=True)
class FixPlan:
    entry_id: str
    fixes: tuple[PlannedFix, ...]
    notes: tuple[str, ...] = ()

    def diff(self) -> str:
        return "".join(f.diff() for f in self.fixes)

    def applicable(self, unsafe: bool = False) -> tuple[PlannedFix, ...]:
        """The fixes apply would write: safe ones, and unsafe ones when allowed; never display-only."""
        allowed = ("safe", "unsafe") if unsafe else ("safe",)
        return tuple(f for f in self.fixes if f.safety in allowed and f.edits)


def plan_to_dict(plan: FixPlan) -> dict:
    """A JSON-ready dict of a plan."""
    return {
        "schema": "gpudoctor.fixplan/1",
        "entry": plan.entry_id,
        "notes": list(plan.notes),
        "fixes": [
            {
                "entry": f.entry_id, "action": f.action_id, "kind": f.kind, "safety": f.safety,
                "title": f.title, "why": f.why, "notes": list(f.notes),
                "commands": list(f.commands), "env": [{"name": k, "value": v} for k, v in f.env],
                "edits": [{"path": e.path, "before_sha256": e.before_sha256, "creates": e.creates, "diff": e.diff()}
                          for e in f.edits],
            }
            for f in plan.fixes
        ],
    }
