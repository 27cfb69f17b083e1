"""Lint: a training script with its findings inline, each linked to its catalogue entry and its fix."""
from __future__ import annotations

import os

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, OptionList
from textual.widgets.option_list import Option

from gpudoctor.tui.logfile import LogFile
from gpudoctor.tui.messages import LintDone, LogOpened, WorkFailed
from gpudoctor.tui.widgets.logview import LogView
from gpudoctor.tui.work import background

SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "note": "cyan"}


def finding_option(finding, folder: str | None = None) -> Option:
    # the column 1-based, as `gpudoctor lint` and editors count it (the JSON keeps ast's 0-based col); a finding of
    # the launch command has no place in the script; linting a folder, each finding names its file
    from gpudoctor.engine.lint.command import COMMAND

    where = " cmd    " if finding.path == COMMAND else f"{finding.line:>4}:{finding.col + 1:<3}"
    if folder is not None and finding.path != COMMAND:
        where = f"{os.path.relpath(finding.path, folder)}:{finding.line}:{finding.col + 1} "
    line = Text.assemble((where, "dim"), (f"{finding.severity:<8}",
                         SEVERITY_STYLE.get(finding.severity, "")), (f"{finding.entry_id:<5}", "bold"),
                         f" {finding.message}", (" [fix]" if finding.fix_id else "", "green"))
    return Option(line)


class LintScreen(Screen):
    AUTO_FOCUS = "#lint-findings"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("e", "entry", "Entry"),
        Binding("f", "fix", "Fix"),
        Binding("l", "focus_source", "Source", show=False),
    ]

    def __init__(self, path: str, cmd: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.cmd = cmd  # the launch command: its findings (D2, D27, MN5...) join the script's, as `lint --cmd` does
        self.result = None
        self.logfile = None
        self.stamp = None  # the script's (mtime, size, inode) when it was last linted
        self._opening = None  # the file whose source is being read for the source pane

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("linting…", id="lint-status")
        yield OptionList(id="lint-findings")
        yield LogView(id="lint-source")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"lint {self.path}"
        self.relint()

    @property
    def folder(self) -> str | None:
        return self.path if os.path.isdir(self.path) else None

    def _stamp(self):
        """The linted files' (mtime, size, inode): the script, or in a folder the files with findings."""
        paths = [self.path]
        if self.folder is not None and self.result is not None:
            from gpudoctor.engine.lint.command import COMMAND

            paths = sorted({f.path for f in self.result.findings if f.path != COMMAND})
        stamps = []
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                stamps.append(None)
                continue
            stamps.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(stamps)

    def on_screen_resume(self) -> None:
        """Back from a fix that rewrote the script (or an undo, or an editor): the findings and the source are read
        again, so the view never shows lines that are no longer there."""
        if self.stamp is not None and self._stamp() != self.stamp:
            self.query_one("#lint-status", Label).update("the script changed: linting again…")
            self.relint()

    def relint(self) -> None:
        path, cmd = self.path, self.cmd
        self.stamp = self._stamp()
        self._opening = None
        if self.folder is not None:
            self.logfile = None  # the file shown may have changed: read again with the findings

        def run() -> None:
            from gpudoctor.engine.lint import lint_paths
            from gpudoctor.engine.lint.command import script_reader, with_command

            result = lint_paths([path], jobs=1)
            if cmd:
                result = with_command(result, cmd, read_script=script_reader([path]))
            self.post_message(LintDone(result))
            if not os.path.isdir(path):  # a folder's files are opened as their findings are shown
                self._load(path)

        background(self, run, name="lint")

    def _load(self, path: str) -> None:
        try:
            logfile = LogFile(path)
        except OSError:
            return  # lint_paths has named the file and the reason
        logfile.index()
        self.post_message(LogOpened(logfile))

    def _open_source(self, path: str) -> None:
        if self._opening == path:
            return
        self._opening = path
        background(self, lambda: self._load(path), name="lint-source")

    def on_lint_done(self, message: LintDone) -> None:
        self.result = result = message.result
        findings = self.query_one("#lint-findings", OptionList)
        was = findings.highlighted
        findings.clear_options()
        findings.add_options([finding_option(f, self.folder) for f in result.findings])
        if self.folder is not None:
            self.stamp = self._stamp()
        status = Text(f"{len(result.findings)} finding(s) in {self.path}" + (" and the launch command" if self.cmd else ""))
        for path, error in result.errors:
            status = Text(f"{path}: {error}", style="bold red")
        if result.findings:
            status.append(" · e entry, f fix, l source", style="dim")
            findings.highlighted = min(was or 0, len(result.findings) - 1)
        self.query_one("#lint-status", Label).update(status)
        self.show_lines()

    def on_log_opened(self, message: LogOpened) -> None:
        self.logfile = message.logfile
        view = self.query_one("#lint-source", LogView)
        view.show_file(self.logfile)
        view.grow(self.logfile.line_count)
        self.show_lines()

    def show_lines(self) -> None:
        if self.result is None:
            return
        if self.logfile is None:
            finding = self.finding
            if self.folder is not None and finding is not None and os.path.isfile(finding.path):
                self._open_source(finding.path)
            return
        view = self.query_one("#lint-source", LogView)
        from gpudoctor.engine.lint.command import COMMAND

        finding = self.finding
        if finding is not None and finding.path != COMMAND and finding.path != self.logfile.path:
            self._open_source(finding.path)  # a folder's finding in another file: its source comes next
            return
        view.evidence = {f.line for f in self.result.findings if f.path == self.logfile.path}
        if finding is not None and finding.path != COMMAND:
            view.jump_to(finding.line)
        view.refresh()

    @property
    def finding(self):
        findings = self.query_one("#lint-findings", OptionList)
        if self.result is None or findings.highlighted is None or not self.result.findings:
            return None
        return self.result.findings[findings.highlighted]

    @on(OptionList.OptionHighlighted, "#lint-findings")
    def highlighted(self) -> None:
        self.show_lines()

    @on(OptionList.OptionSelected, "#lint-findings")
    def action_entry(self) -> None:
        if self.finding is not None:
            self.app.open_entry(self.finding.entry_id)

    def action_fix(self) -> None:
        finding = self.finding
        if finding is None:
            return
        if not finding.fix_id:
            self.notify(f"{finding.entry_id} has no automatic fix for this; e shows the entry's steps",
                        severity="warning")
            return
        from gpudoctor.engine.lint.command import COMMAND

        script = finding.path if finding.path != COMMAND else (self.path if self.folder is None else None)
        self.app.open_fix(finding.entry_id, script=script)

    def action_focus_source(self) -> None:
        self.query_one("#lint-source").focus()

    def on_work_failed(self, message: WorkFailed) -> None:
        self.query_one("#lint-status", Label).update(Text(message.error, style="bold red"))
