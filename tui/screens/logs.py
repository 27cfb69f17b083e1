"""Logs: the diagnosis (ranked findings with tier and score), the log itself with evidence lines lit, the rank timeline."""
from __future__ import annotations

import os
import tempfile
import threading
import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, OptionList, ProgressBar, Static
from textual.widgets.option_list import Option

from gpudoctor.engine.context_guess import from_content_only
from gpudoctor.engine.display import clean_for_display
from gpudoctor.kb.record import replace
from gpudoctor.tui.logfile import Cancelled as IndexCancelled
from gpudoctor.tui.logfile import LogFile
from gpudoctor.tui.messages import (DiagnosisDone, IndexProgress, LogOpened, Progress, SourcesResolved,
                                    WorkFailed)
from gpudoctor.tui.widgets.logview import LogView
from gpudoctor.tui.widgets.timeline import RankTimeline
from gpudoctor.tui.work import Cancelled, background

PROGRESS_EVERY_S = 0.1
FIRST_LINES_WAIT_S = 1.0  # the diagnosis waits this long at most for the log's first lines to be on screen


def finding_option(n: int, finding) -> Option:
    tier = getattr(finding, "tier", "match")
    style = "bold green" if tier == "match" else "yellow"
    witnesses = sorted({ev.signature.split(":", 1)[0] for ev in finding.evidence
                        if ev.signature.startswith(("script:", "command:", "probe:"))})
    # ahead of the title, which an 80-column terminal cuts: the witness is what makes a guess a confirmed cause
    seen = ("confirmed by the " + " and ".join(witnesses) + ": ", "cyan") if witnesses else ""
    line = Text.assemble((f"{n}. ", "dim"), (f"{tier:<9}", style), f"{finding.score:4.2f} ",
                         (f"{finding.id:<5}", "bold"), " ", seen, finding.title)
    return Option(line, id=finding.id)


class LogScreen(Screen):
    AUTO_FOCUS = "#log"
    BINDINGS = [
        Binding("escape", "back", "Back / cancel"),
        Binding("n", "next_evidence", "Next evidence"),
        Binding("N", "next_evidence(-1)", "Prev evidence"),
        Binding("e", "open_finding", "Entry"),
        Binding("p", "probe_finding", "Probes"),
        Binding("f", "fix_finding", "Fix"),
        Binding("l", "focus_log", "Log", show=False),
        Binding("t", "toggle_timeline", "Timeline"),
        Binding("right_square_bracket", "next_file(1)", "Next file", show=False),
        Binding("left_square_bracket", "next_file(-1)", "Prev file", show=False),
    ]

    def __init__(self, paths: list[str] | None = None, *, text: str | None = None) -> None:
        super().__init__()
        self.paths = list(paths or [])
        self.text = text
        self.sources: list = []
        self.diagnosis = None
        self.files: dict[str, LogFile] = {}  # source name -> open LogFile
        self.current: str | None = None
        self.evidence_pos = -1
        self.diagnose_worker = None
        self.index_workers: dict[str, object] = {}
        self.diagnosis_seconds: float | None = None
        self.pending_jump: tuple[str, int] | None = None
        self.first_lines = threading.Event()  # set once the log view has lines: the scan may take the cores
        self.temp_files: list[str] = []  # pasted text, inflated .gz: removed when the screen closes

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="log-status"):
            yield Label("reading…", id="status")
            yield ProgressBar(id="progress", show_eta=False)
        yield OptionList(id="findings")
        yield Static("", id="verdict")
        yield Label("", id="filebar")
        yield LogView(id="log")
        yield RankTimeline(id="timeline")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "diagnosis"
        self.query_one("#findings").display = False
        self.query_one("#verdict").display = False
        self.query_one("#timeline").display = False
        self.start_diagnosis()

    # --- the diagnosis worker ----------------------------------------------------
    def start_diagnosis(self) -> None:
        catalog, names, paths, text = self.app.catalog, dict(self.app.names), list(self.paths), self.text
        first_lines = self.first_lines

        def run() -> None:
            from gpudoctor.engine.sources import InputError, resolve_some
            from gpudoctor.tui.work import get_current_worker

            worker = get_current_worker()
            if text is not None:
                fd, tmp = tempfile.mkstemp(prefix="gpudoctor-pasted-", suffix=".log")
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                paths[:] = [tmp]
                names[tmp] = "<pasted>"
                self.temp_files.append(tmp)
            try:
                found, left_out = resolve_some(paths)
            except InputError as exc:
                self.post_message(WorkFailed("diagnosis", str(exc)))
                return
            sources = [replace(s, name=names.get(str(s.path), s.name)) for s in found]
            if left_out:
                from gpudoctor.engine.display import clean_for_display

            for problem in left_out:  # a train.py beside the logs: named, and the logs are read
                self.app.call_from_thread(self.notify, clean_for_display(problem), severity="warning", timeout=8,
                                          markup=False)
            self.post_message(SourcesResolved(sources))
            first_lines.wait(FIRST_LINES_WAIT_S)
            total = sum(s.size or 0 for s in sources) or None
            shown = [0.0]

            def progress(done: int) -> None:  # bytes read so far
                now = time.monotonic()
                if now - shown[0] >= PROGRESS_EVERY_S:
                    shown[0] = now
                    self.post_message(Progress("diagnosis", done, total))

            job = {"catalog": catalog, "sources": sources, "script": getattr(self.app, "script", None),
                   "cmd": getattr(self.app, "cmd", None)}
            try:
                result, self.diagnosis_seconds = _diagnose(job, worker, progress)
            except InputError as exc:
                self.post_message(WorkFailed("diagnosis", str(exc)))
                return
            self.post_message(DiagnosisDone(result, sources))

        self.diagnose_worker = background(self, run, name="diagnosis")

    def on_sources_resolved(self, message: SourcesResolved) -> None:
        self.sources = [s for s in message.sources if not s.flight]
        if self.sources and self.current is None:
            self.show_source(self.sources[0].name)

    def on_progress(self, message: Progress) -> None:
        worker = self.diagnose_worker
        if worker is None or not worker.is_running:  # a report posted just before esc cancelled: the run is over
            return
        bar = self.query_one("#progress", ProgressBar)
        bar.update(total=message.total, progress=message.done)
        mib = message.done / 2**20
        self.query_one("#status", Label).update(f"diagnosing… {mib:,.0f} MiB read · esc cancels")

    def on_diagnosis_done(self, message: DiagnosisDone) -> None:
        self.diagnosis = diag = message.diagnosis
        self.query_one("#progress").display = False
        n = len(diag.findings)
        size = sum(i.bytes for i in diag.inputs)
        matched = sum(f.tier == "match" for f in diag.findings)
        what = (f"{n} finding{'s' if n != 1 else ''}" if matched else
                f"no match, {n} guess{'es' if n != 1 else ''}")
        status = (f"{what} · {len(diag.inputs)} input(s), {size / 2**20:,.1f} MiB"
                  if n else "nothing in the catalogue explains this log")
        if from_content_only(diag.findings):
            status = f"no failure line: {n} guess{'es' if n != 1 else ''} from the log's content · {size / 2**20:,.1f} MiB"
        problems = [i.problem for i in diag.inputs if i.problem]
        logs = [i for i in diag.inputs if i.kind == "log"]
        if logs and all(i.problem for i in logs) and not n:  # as the CLI says it: nothing was read, not "nothing found"
            status = Text(clean_for_display("no input could be read: " + "; ".join(problems))[:300], style="bold red")
        else:
            for problem in problems:
                self.notify(clean_for_display(problem), severity="warning", timeout=8)
        self.query_one("#status", Label).update(status)
        findings = self.query_one("#findings", OptionList)
        findings.clear_options()
        findings.add_options([finding_option(i, f) for i, f in enumerate(diag.findings, 1)])
        findings.display = bool(n)
        verdict = self.query_one("#verdict", Static)
        hint = self._confirm_hint(diag)
        if diag.verdict or diag.notes or hint:
            lines = [clean_for_display(line) for line in diag.verdict + diag.notes]  # they quote the log
            verdict.update(Text("\n".join(lines)[:600] + hint, style="italic"))
            verdict.display = True
        timeline = self.query_one("#timeline", RankTimeline)
        if len(diag.ranks) > 1:
            timeline.set_ranks(diag.ranks, diag.verdict)
        if n:
            findings.highlighted = 0
            findings.focus()
            self.select_finding(0)

    def _confirm_hint(self, diag) -> str:
        """For a diagnosis of guesses only, read without the script or the command: what would confirm one."""
        from gpudoctor.engine.corroborate import confirmable

        if any(f.tier == "match" for f in diag.findings) or getattr(self.app, "script", None) \
                or getattr(self.app, "cmd", None):
            return ""
        ways = confirmable(diag.findings, self.app.catalog)
        parts = []
        if "probe" in ways:
            parts.append("p runs a guess's probes")
        if "script" in ways:
            parts.append(f"--script train.py checks the script ({', '.join(ways['script'])})")
        if "command" in ways:
            parts.append(f"--cmd checks the launch command ({', '.join(ways['command'])})")
        if not parts:
            return ""
        return ("\n" if diag.verdict or diag.notes else "") + "Only guesses. To confirm one: " + "; ".join(parts)

    def on_work_failed(self, message: WorkFailed) -> None:
        self.first_lines.set()
        self.query_one("#progress").display = False
        self.query_one("#status", Label).update(Text(clean_for_display(message.error), style="bold red"))

    # --- findings and evidence ---------------------------------------------------
    @property
    def finding(self):
        findings = self.query_one("#findings", OptionList)
        if self.diagnosis is None or findings.highlighted is None:
            return None
        return self.diagnosis.findings[findings.highlighted]

    @on(OptionList.OptionHighlighted, "#findings")
    def finding_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.select_finding(event.option_index)

    @on(OptionList.OptionSelected, "#findings")
    def finding_selected(self) -> None:
        self.action_open_finding()

    def select_finding(self, index: int) -> None:
        if self.diagnosis is None or not self.diagnosis.findings:
            return
        self.evidence_pos = -1
        self.action_next_evidence(1)

    def evidence_lines(self, name: str) -> set[int]:
        finding = self.finding
        if finding is None:
            return set()
        return {ev.line for ev in _log_evidence(finding) if ev.file == name}

    def action_next_evidence(self, step: int = 1) -> None:
        finding = self.finding
        evidence = _log_evidence(finding)
        if not evidence:
            return
        self.evidence_pos = (self.evidence_pos + step) % len(evidence)
        ev = evidence[self.evidence_pos]
        self.jump(ev.file, ev.line)
        self.update_filebar()

    def jump(self, name: str, line: int) -> None:
        if name != self.current:
            self.show_source(name)
        log = self.query_one("#log", LogView)
        log.evidence = self.evidence_lines(name)
        logfile = self.files.get(name)
        if logfile is None or logfile.known_lines < line:
            self.pending_jump = (name, line)  # taken when the index reaches that line
        else:
            log.jump_to(line)
        log.refresh()

    # --- the log file: opened and indexed in a worker -------------------------------
    def show_source(self, name: str) -> None:
        source = next((s for s in self.sources if s.name == name), None)
        if source is None:
            return
        self.current = name
        log = self.query_one("#log", LogView)
        if name in self.files:
            log.show_file(self.files[name], self.evidence_lines(name))
            self.update_filebar()
            return
        log.show_file(None)
        self.query_one("#filebar", Label).update(Text(f"{clean_for_display(name)} · opening…"))

        def run() -> None:
            from gpudoctor.tui.work import get_current_worker

            worker = get_current_worker()
            path = str(source.path)
            if source.compressed:
                path = _decompress(source)
                self.temp_files.append(path)
            logfile = LogFile(path, name)
            self.post_message(LogOpened(logfile))
            last = [0.0]

            def progress(lines: int, _bytes: int) -> None:
                now = time.monotonic()
                if now - last[0] >= PROGRESS_EVERY_S:
                    last[0] = now
                    self.post_message(IndexProgress(logfile, lines, False))

            try:
                logfile.index(cancelled=lambda: worker.is_cancelled, progress=progress)
            except IndexCancelled:
                return
            self.post_message(IndexProgress(logfile, logfile.line_count, True))

        self.index_workers[name] = background(self, run, name=f"index {name}", exclusive=False)

    def on_log_opened(self, message: LogOpened) -> None:
        logfile = message.logfile
        self.files[logfile.name] = logfile
        if logfile.name == self.current:
            self.query_one("#log", LogView).show_file(logfile, self.evidence_lines(logfile.name))
            self.update_filebar()

    def on_index_progress(self, message: IndexProgress) -> None:
        logfile = message.logfile
        if logfile.name != self.current:
            return
        log = self.query_one("#log", LogView)
        if log.logfile is not logfile:
            log.show_file(logfile, self.evidence_lines(logfile.name))
        log.grow(message.lines)
        if message.lines or message.complete:
            self.call_after_refresh(self.first_lines.set)
        if self.pending_jump and self.pending_jump[0] == logfile.name and message.lines >= self.pending_jump[1]:
            log.jump_to(self.pending_jump[1])
            self.pending_jump = None
        self.update_filebar(message.complete)

    def update_filebar(self, complete: bool | None = None) -> None:
        finding = self.finding
        evidence = _log_evidence(finding)
        if evidence and 0 <= self.evidence_pos < len(evidence):
            ev = evidence[self.evidence_pos]
            self.query_one("#filebar", Label).update(Text(
                f"{finding.id} evidence {self.evidence_pos + 1}/{len(evidence)} (n/N) · line {ev.line:,} · "
                + clean_for_display(ev.file)))
            return
        logfile = self.files.get(self.current)
        if logfile is None:
            return
        complete = logfile.complete if complete is None else complete
        count = f"{logfile.known_lines:,} lines" + ("" if complete else " so far, indexing…")
        which = f" · file {self.source_index + 1}/{len(self.sources)} ([ ])" if len(self.sources) > 1 else ""
        self.query_one("#filebar", Label).update(Text(f"{clean_for_display(self.current)} · {count}{which}"))

    @property
    def source_index(self) -> int:
        names = [s.name for s in self.sources]
        return names.index(self.current) if self.current in names else 0

    def action_next_file(self, step: int) -> None:
        if len(self.sources) > 1:
            self.show_source(self.sources[(self.source_index + step) % len(self.sources)].name)
            self.evidence_pos = -1
            self.update_filebar()

    # --- actions -------------------------------------------------------------------
    def action_back(self) -> None:
        worker = self.diagnose_worker
        if worker is not None and worker.is_running:
            worker.cancel()
            self.query_one("#progress").display = False
            self.query_one("#status", Label).update("diagnosis cancelled")
            return
        self.app.pop_screen()

    def action_open_finding(self) -> None:
        if self.finding is not None:
            self.app.open_entry(self.finding.id)

    def action_probe_finding(self) -> None:
        finding = self.finding
        if finding is None or not finding.probes:
            self.notify("no probe for this finding", severity="warning")
            return
        self.app.run_probes(list(finding.probes), finding.id)

    def action_fix_finding(self) -> None:
        finding = self.finding
        if finding is None or not self.app.fixes_available:
            return
        self.app.open_fix(finding.id, diagnosis=self.diagnosis, logs=[str(s.path) for s in self.sources])

    def action_focus_log(self) -> None:
        self.query_one("#log").focus()

    def action_toggle_timeline(self) -> None:
        timeline = self.query_one("#timeline", RankTimeline)
        timeline.display = not timeline.display and bool(timeline.rows)

    def on_unmount(self) -> None:
        for worker in self.index_workers.values():
            worker.cancel()
        if self.diagnose_worker is not None:
            self.diagnose_worker.cancel()
        for path in self.temp_files:  # an open mapping keeps its pages; the name goes now
            try:
                os.unlink(path)
            except OSError:
                pass


def _diagnose(job: dict, worker, progress):
    """(Diagnosis, seconds), from a child process that esc kills at once (tui/diagnose_child.py)."""
    from gpudoctor.tui import diagnose_child

    try:
        return diagnose_child.diagnose(job, cancelled=lambda: worker.is_cancelled, progress=progress)
    except diagnose_child.Cancelled:
        raise Cancelled() from None


def _decompress(source) -> str:
    """A compressed log is inflated once into a temporary file so that it can be memory-mapped."""
    import shutil

    from gpudoctor.engine.sources import open_source

    fd, tmp = tempfile.mkstemp(prefix="gpudoctor-", suffix=".log")
    with os.fdopen(fd, "wb") as out, open_source(source) as stream:
        shutil.copyfileobj(stream, out, 1 << 20)
    return tmp


def _log_evidence(finding) -> list:
    """A finding's evidence lines that sit in the logs (not in the script that confirmed it, not in a flight dump)."""
    if finding is None:
        return []
    return [ev for ev in finding.evidence if ev.line > 0 and not ev.signature.startswith("script:")]
