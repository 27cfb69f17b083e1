"""Lint result types and the small base every check shares (code, slug, severity, message)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

SEVERITIES = ("error", "warning", "note")


@dataclass(frozen=True)
class LintFinding:
    path: str
    line: int  # 1-based
    col: int  # 0-based, like ast
    entry_id: str  # catalogue id: D3, D21, D22, P3, ...
    rule: str  # short slug, e.g. "collective-in-rank-branch"
    severity: str  # error | warning | note
    message: str
    fix_id: str | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "line": self.line, "col": self.col, "entry_id": self.entry_id,
                "rule": self.rule, "severity": self.severity, "message": self.message, "fix_id": self.fix_id}


@dataclass(frozen=True)
class LintResult:
    findings: tuple[LintFinding, ...]
    errors: tuple[tuple[str, str], ...]  # (path, one-line message) for unreadable/unparsable files
    files: int  # files linted


@dataclass(frozen=True)
class Hit:
    """What a check reports before the runner attaches path and fix id."""

    line: int
    col: int
    message: str
    severity: str | None = None  # None: the check's default
    slug: str | None = None  # None: the check's own (a check that also reads launch lines names those its own way)


class Check:
    """One check: a catalogue entry id, a slug naming the failure, a default severity and a finder."""

    code: str = ""  # the catalogue entry id
    slug: str = ""
    severity: str = "warning"
    summary: str = ""  # one line for `gpudoctor lint --list-rules`
    languages: tuple[str, ...] = ("python",)

    def find(self, script) -> Iterator[Hit]:  # pragma: no cover - every check overrides
        raise NotImplementedError


def source_line(path: str, line: int, cache: dict) -> str | None:
    """Line `line` (1-based) of a linted file, read once per file into cache; None when it is gone."""
    if path not in cache:
        try:
            if str(path).endswith(".ipynb"):  # the script its code cells make, as lint read it
                from gpudoctor.engine.lint.notebook import NotANotebook, notebook_script

                with open(path, "rb") as fh:
                    try:
                        cache[path] = notebook_script(fh.read())[0].splitlines()
                    except NotANotebook:
                        cache[path] = []
            else:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    cache[path] = fh.read().splitlines()
        except OSError:
            cache[path] = []
    lines = cache[path]
    return lines[line - 1] if 0 < line <= len(lines) else None
