"""Messages that background workers post back to the screens that asked for the work."""
from __future__ import annotations

from textual.message import Message


class SearchDone(Message):
    """Hits for one query (kb.search Hit objects), and how long the search took."""

    def __init__(self, query: str, hits: list, seconds: float) -> None:
        super().__init__()
        self.query, self.hits, self.seconds = query, hits, seconds


class Progress(Message):
    """Work in progress: replaces the previous progress message of the same task."""

    def __init__(self, task: str, done: float, total: float | None, text: str = "") -> None:
        super().__init__()
        self.task, self.done, self.total, self.text = task, done, total, text


class DiagnosisDone(Message):
    """A finished diagnosis (gpudoctor.engine.diagnose.Diagnosis) and the sources it read."""

    def __init__(self, diagnosis, sources: list) -> None:
        super().__init__()
        self.diagnosis, self.sources = diagnosis, sources


class IndexProgress(Message):
    """A log file's line index grew: `lines` are readable now; `complete` when the whole file is indexed."""

    def __init__(self, logfile, lines: int, complete: bool) -> None:
        super().__init__()
        self.logfile, self.lines, self.complete = logfile, lines, complete


class ProbeStarted(Message):
    def __init__(self, probe_ids: list[str]) -> None:
        super().__init__()
        self.probe_ids = probe_ids


class ProbeFinished(Message):
    """One probe's Result (gpudoctor.probes.base.Result)."""

    def __init__(self, result) -> None:
        super().__init__()
        self.result = result


class ProbesDone(Message):
    def __init__(self, results: list, cancelled: bool) -> None:
        super().__init__()
        self.results, self.cancelled = results, cancelled


class WorkFailed(Message):
    """A worker raised: the central handler has told the user; the screen tidies up its own state."""

    def __init__(self, name: str, error: str) -> None:
        super().__init__()
        self.name, self.error = name, error


class SourcesResolved(Message):
    """The inputs a log screen will read (gpudoctor.engine.sources.Source), before the diagnosis finishes."""

    def __init__(self, sources: list) -> None:
        super().__init__()
        self.sources = sources


class LogOpened(Message):
    """A LogFile is open and ready for its index to be built."""

    def __init__(self, logfile) -> None:
        super().__init__()
        self.logfile = logfile


class FixPlanned(Message):
    """A fix plan (gpudoctor.engine.fixes.FixPlan) for the fix screen."""

    def __init__(self, plan) -> None:
        super().__init__()
        self.plan = plan


class FixWritten(Message):
    """apply_plan's ApplyResult, or undo_last's UndoResult."""

    def __init__(self, result, undo: bool) -> None:
        super().__init__()
        self.result, self.undo = result, undo


class LintDone(Message):
    """gpudoctor.engine.lint.LintResult for the lint screen."""

    def __init__(self, result) -> None:
        super().__init__()
        self.result = result
