"""The gpudoctor Textual app: screens, global bindings, the command palette, and the one worker-error handler."""
from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.worker import Worker, WorkerState

from gpudoctor.engine.display import clean_for_display
from gpudoctor.tui.commands import GpuDoctorCommands
from gpudoctor.tui.messages import WorkFailed
from gpudoctor.tui.work import Cancelled


def _has_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


class GpuDoctorApp(App):
    """Symptom search, entries, logs, probes: one keyboard-first session."""

    CSS_PATH = "app.tcss"
    TITLE = "gpudoctor"
    COMMANDS = App.COMMANDS | {GpuDoctorCommands}
    BINDINGS = [
        Binding("f1", "help", "Help"),
        Binding("question_mark", "help", "Help", show=False),
        Binding("ctrl+o", "open_logs", "Open log"),
        Binding("ctrl+r", "run_check", "Check", tooltip="run every probe on this machine"),
        Binding("ctrl+l", "lint_script", "Lint", tooltip="check a training script"),
        Binding("ctrl+s", "dump_stacks", "Stacks", tooltip="where each rank of a job running here is stopped (py-spy)"),
        Binding("ctrl+t", "toggle_theme", "Theme", show=False),
    ]

    def __init__(self, catalog, *, logs: list[str] | None = None, script: str | None = None,
                 names: dict[str, str] | None = None, probe_options: dict | None = None, cmd: str | None = None):
        super().__init__()
        self.catalog = catalog
        self.initial_logs = list(logs or [])
        self.script = script
        self.cmd = cmd  # the launch command, a witness beside the logs (engine/corroborate.py)
        self.names = dict(names or {})  # path -> name to show (a spooled stdin is "<stdin>")
        self.probe_options = dict(probe_options or {})
        self.worker_owners: dict[Worker, object] = {}
        self.fixes_available = _has_module("gpudoctor.engine.fixes")
        self.lint_available = _has_module("gpudoctor.engine.lint")

    def on_mount(self) -> None:
        from gpudoctor.tui.screens.search import SearchScreen

        self.push_screen(SearchScreen())
        if self.script and not self.initial_logs and self.lint_available:
            self.open_lint(self.script)
        if self.initial_logs:
            self.open_logs(self.initial_logs)

    # --- flows, callable from any screen and the palette -------------------------
    def open_entry(self, entry_id: str) -> None:
        from gpudoctor.tui.screens.entry import EntryScreen

        entry = self.catalog.get(entry_id)
        if entry is None:
            self.notify(f"no entry {entry_id!r}", severity="warning")
            return
        self.push_screen(EntryScreen(entry.id))

    def open_logs(self, paths: list[str]) -> None:
        from gpudoctor.tui.screens.logs import LogScreen

        self.push_screen(LogScreen(paths))

    def run_probes(self, probe_ids: list[str] | None, entry_id: str | None = None) -> None:
        from gpudoctor.tui.screens.probes import ProbeScreen

        self.push_screen(ProbeScreen(probe_ids, entry_id))

    def open_fix(self, entry_id: str, script: str | None = None, *, diagnosis=None, logs=None) -> None:
        from gpudoctor.tui.screens.fix import FixScreen

        self.push_screen(FixScreen(entry_id, script or self.script, diagnosis=diagnosis, logs=logs, cmd=self.cmd))

    def open_lint(self, path: str) -> None:
        from gpudoctor.tui.screens.lint import LintScreen

        self.push_screen(LintScreen(path, cmd=self.cmd))

    def action_lint_script(self) -> None:
        from gpudoctor.tui.screens.open import OpenScreen

        def opened(paths: list[str] | None) -> None:
            if paths:
                self.open_lint(paths[0])

        self.push_screen(OpenScreen(Path(self.script) if self.script else Path.cwd(), title="Lint a script"),
                         opened)

    def action_open_logs(self) -> None:
        from gpudoctor.tui.screens.open import OpenScreen

        def opened(paths: list[str] | None) -> None:
            if paths:
                self.open_logs(paths)

        self.push_screen(OpenScreen(Path.cwd()), opened)

    def action_dump_stacks(self) -> None:
        """Dump where each rank of a job running on this machine is stopped, then open the dumps' diagnosis."""
        from gpudoctor.tui.work import background

        def run() -> None:
            from gpudoctor.probes import stackdump

            pyspy = stackdump.py_spy()
            if pyspy is None:
                self.call_from_thread(self.notify, "py-spy is not installed: pip install py-spy", severity="error")
                return
            processes = stackdump.find_training_processes()
            if not processes:
                self.call_from_thread(self.notify, "no training process on this machine (no Python process here has "
                                      "RANK, LOCAL_RANK or an MPI/SLURM rank; another user's need root)",
                                      severity="warning", timeout=8)
                return
            self.call_from_thread(self.notify, f"dumping {len(processes)} rank(s) with py-spy…")
            folder = stackdump.new_folder()
            dumps = stackdump.dump_stacks(pyspy, processes)
            for dump in dumps:
                if dump.text is None:
                    self.call_from_thread(self.notify, f"{dump.process.label}: {clean_for_display(dump.error)}",
                                          severity="warning", timeout=8)
            if stackdump.save(folder, dumps):
                self.call_from_thread(self.open_logs, [str(folder)])

        background(self, run, name="stacks")

    def action_run_check(self) -> None:
        self.run_probes(None)

    def action_help(self) -> None:
        from gpudoctor.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    # --- the one handler for every background worker ------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state == WorkerState.ERROR:
            owner = self.worker_owners.pop(worker, None)
            error = worker.error
            if isinstance(error, Cancelled):
                return
            text = f"{type(error).__name__}: {error}".splitlines()[0][:200]
            self.log.error(f"worker {worker.name} failed", error)
            self.notify(f"{worker.name} failed: {text}", severity="error", timeout=8)
            if owner is not None:
                owner.post_message(WorkFailed(worker.name, text))
        elif event.state in (WorkerState.SUCCESS, WorkerState.CANCELLED):
            self.worker_owners.pop(worker, None)
