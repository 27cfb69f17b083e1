"""Fix: an entry's fix planned against the script, shown as a coloured diff; Apply only after a yes, then Undo."""
from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Label, Static

from gpudoctor.tui.messages import FixPlanned, FixWritten, WorkFailed
from gpudoctor.tui.screens.confirm import ConfirmScreen
from gpudoctor.tui.work import background

SAFETY_STYLE = {"safe": "bold green", "unsafe": "bold yellow", "display-only": "bold cyan"}


def diff_text(diff: str) -> Text:
    """A unified diff, coloured line by line (its text sanitised: it quotes the user's file)."""
    from gpudoctor.engine.display import clean_for_display

    out = Text(no_wrap=True, overflow="ellipsis")
    for line in diff.splitlines():
        shown = clean_for_display(line)
        style = ("bold" if line.startswith(("+++", "---")) else "cyan" if line.startswith("@@")
                 else "green" if line.startswith("+") else "red" if line.startswith("-") else "")
        out.append(shown + "\n", style=style)
    return out


# the planner speaks in the CLI's options; on this screen the same inputs are keys and fields
_TUI_WORDS = (("give --script train.py", "press s and give the script"),
              ('give --cmd "..." (the launch command)', "press c and give the launch command"),
              ("give --param ", "type in the params field "),
              ("give --config FILE", "run `gpudoctor fix --config FILE` in a shell"))


def in_tui(note: str) -> str:
    for cli, tui in _TUI_WORDS:
        note = note.replace(cli, tui)
    return note


def render_plan(plan, pointed=None) -> Group:
    parts = []
    if pointed is not None and pointed.step:
        parts.append(Text.assemble((f"what this log calls for (step {pointed.step} of {pointed.steps}): ", "bold"),
                                   pointed.text))
        if pointed.code:
            parts.append(Text("  " + pointed.code.replace("\n", "\n  "), style="green"))
        parts.append(Text(""))
    for fix in plan.fixes:
        head = Text.assemble((f"{fix.safety:<12}", SAFETY_STYLE.get(fix.safety, "bold")),
                             (f"{fix.action_id}", "bold"), f" ({fix.kind}): {fix.title}")
        parts.append(head)
        if fix.why:
            label = {"unsafe": "why it is unsafe: ", "display-only": "why it is shown only: "}.get(fix.safety, "")
            parts.append(Text("  " + label + fix.why, style="italic"))
        for name, value in fix.env:
            parts.append(Text(f"  export {name}={value}", style="green"))
        for command in fix.commands:
            parts.append(Text(f"  $ {command}", style="green"))
        if fix.edits:
            parts.append(diff_text(fix.diff()))
        for note in getattr(fix, "notes", ()):
            parts.append(Text("  note: " + in_tui(note), style="dim"))
        parts.append(Text(""))
    for note in plan.notes:
        parts.append(Text("note: " + in_tui(note), style="dim"))
    if not parts:
        parts.append(Text(f"{plan.entry_id}: nothing to fix with these inputs", style="dim"))
    return Group(*parts)


class FixScreen(Screen):
    AUTO_FOCUS = "#fix-body"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("a", "apply(False)", "Apply"),
        Binding("A", "apply(True)", "Apply incl. unsafe"),
        Binding("u", "undo", "Undo"),
        Binding("s", "focus_script", "Script"),
        Binding("c", "focus_cmd", "Cmd"),
    ]

    def __init__(self, entry_id: str, script: str | None = None, *, diagnosis=None, logs=None,
                 cmd: str | None = None) -> None:
        super().__init__()
        self.entry_id = entry_id
        self.script = script
        self.cmd = cmd  # the launch command a command fix rewrites
        self.params = ""  # KEY=VALUE facts the user types (fix --param)
        self.diagnosis, self.logs = diagnosis, logs
        self.plan = None
        self.last_result = None
        self.shown_text = ""  # the plan as displayed, in plain text
        self.stale_note = ""  # why the plan was made again (a file changed since its preview), shown once

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="fix-inputs"):
            yield Label("script:", classes="bar-label")
            yield Input(self.script or "", placeholder="training script to patch (enter re-plans)", id="fix-script")
        with Horizontal(id="fix-inputs-more"):
            yield Label("command:", classes="bar-label")
            yield Input(self.cmd or "", placeholder="launch command to rewrite", id="fix-cmd")
            yield Label("params:", classes="bar-label")
            yield Input("", placeholder="KEY=VALUE ... (bad_gpu=3)", id="fix-params")
        yield Label("planning…", id="fix-status")
        with VerticalScroll(id="fix-body"):
            yield Static("", id="fix-plan")
        yield Footer()

    @property
    def pointed(self):
        """The fix step and actions the diagnosed log's evidence calls for, when the fix was opened from a finding."""
        findings = self.diagnosis.findings if self.diagnosis is not None else ()
        return next((f.pointed for f in findings if f.id == self.entry_id), None)

    def on_mount(self) -> None:
        self.sub_title = f"fix {self.entry_id}"
        self.replan()

    def replan(self) -> None:
        from gpudoctor.engine.fixes.facts import split_params

        catalog, entry_id, script, cmd = self.app.catalog, self.entry_id, self.script or None, self.cmd or None
        diagnosis, logs, params = self.diagnosis, self.logs, split_params(self.params)

        def run() -> None:
            from gpudoctor.engine.fixes import FixError, facts_from_diagnosis, plan_fix
            from gpudoctor.engine.fixes.facts import parse_params

            facts = facts_from_diagnosis(diagnosis, logs=logs) if diagnosis is not None else {}
            pointed = self.pointed
            try:
                facts.update(parse_params(params))
                plan = plan_fix(catalog, entry_id, script=script, cmd=cmd, facts=facts,
                                only=pointed.actions if pointed is not None else None,
                                only_why="the log's evidence does not call for it")
            except FixError as exc:
                self.post_message(WorkFailed("fix", str(exc)))
                return
            self.post_message(FixPlanned(plan))

        background(self, run, name="fix plan")

    @on(Input.Submitted, "#fix-script")
    def script_given(self, event: Input.Submitted) -> None:
        self.script = event.value.strip() or None
        self.query_one("#fix-status", Label).update("planning…")
        self.replan()
        self.query_one("#fix-body").focus()

    @on(Input.Submitted, "#fix-cmd")
    @on(Input.Submitted, "#fix-params")
    def command_given(self, event: Input.Submitted) -> None:
        self.cmd = self.query_one("#fix-cmd", Input).value.strip() or None
        self.params = self.query_one("#fix-params", Input).value.strip()
        self.query_one("#fix-status", Label).update("planning…")
        self.replan()
        self.query_one("#fix-body").focus()

    def on_fix_planned(self, message: FixPlanned) -> None:
        self.plan = plan = message.plan
        shown = render_plan(plan, self.pointed)
        self.shown_text = "\n".join(part.plain for part in shown.renderables)
        self.query_one("#fix-plan", Static).update(shown)
        safe, unsafe = len(plan.applicable(False)), len(plan.applicable(True))
        counts = f"{len(plan.fixes)} fix(es)"
        if unsafe:
            counts += f" · a applies {safe} safe" + (f", A also the {unsafe - safe} unsafe" if unsafe > safe else "")
        note, self.stale_note = self.stale_note, ""
        self.query_one("#fix-status", Label).update(Text(note + self.outcome() + counts,
                                                         style="yellow" if note else ""))

    def outcome(self) -> str:
        if self.last_result is None:
            return ""
        result = self.last_result
        if hasattr(result, "restored"):
            return f"undone: restored {', '.join(result.restored)} · "
        written = ", ".join(result.written) or "nothing (already applied)"
        return f"wrote {written} · u undoes · "

    def on_work_failed(self, message: WorkFailed) -> None:
        self.query_one("#fix-status", Label).update(Text(message.error, style="bold red"))

    def action_focus_script(self) -> None:
        self.query_one("#fix-script", Input).focus()

    def action_focus_cmd(self) -> None:
        self.query_one("#fix-cmd", Input).focus()

    def action_apply(self, unsafe: bool) -> None:
        plan = self.plan
        if plan is None:
            return
        chosen = plan.applicable(unsafe)
        if not chosen:
            why = ("the writable fixes here are unsafe: A applies them (read why first)"
                   if plan.applicable(True) else "nothing written: no fix here edits a file (s gives a script; "
                                                 "env and launch fixes are to follow by hand)")
            self.notify(why, severity="warning")
            self.query_one("#fix-status", Label).update(Text(why, style="yellow"))  # stays after the toast goes
            return
        files = sorted({e.path for f in chosen for e in f.edits})
        detail = "; ".join(f"{f.action_id} ({f.safety})" + (f": {f.why}" if f.safety == "unsafe" else "")
                           for f in chosen)
        question = f"Apply {len(chosen)} fix(es) to {', '.join(files)}?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.apply(plan, unsafe)

        self.app.push_screen(ConfirmScreen(question, detail[:400] + " · a backup is kept; u undoes"), answered)

    def apply(self, plan, unsafe: bool) -> None:
        def run() -> None:
            from gpudoctor.engine.fixes import FixError
            from gpudoctor.engine.fixes.apply import apply_plan

            from gpudoctor.engine.fixes import StaleFileError

            try:
                result = apply_plan(plan, unsafe=unsafe)
            except StaleFileError as exc:  # changed since the preview: plan again from the file as it is now
                self.stale_note = f"{exc.what}: nothing written; planned again from it as it is now · "
                self.post_message(WorkFailed("apply", self.stale_note + "reading it…"))
                self.app.call_from_thread(self.replan)
                return
            except FixError as exc:  # the result would not parse
                self.post_message(WorkFailed("apply", str(exc)))
                return
            self.post_message(FixWritten(result, undo=False))

        background(self, run, name="apply fix")

    def action_undo(self) -> None:
        def answered(yes: bool | None) -> None:
            if not yes:
                return

            def run() -> None:
                from gpudoctor.engine.fixes import FixError
                from gpudoctor.engine.fixes.apply import undo_last

                try:
                    result = undo_last()
                except FixError as exc:
                    self.post_message(WorkFailed("undo", str(exc)))
                    return
                self.post_message(FixWritten(result, undo=True))

            background(self, run, name="undo fix")

        self.app.push_screen(ConfirmScreen("Undo the last applied fix?", "files go back byte for byte"), answered)

    def on_fix_written(self, message: FixWritten) -> None:
        self.last_result = message.result
        self.notify(self.outcome().rstrip(" ·"), title="fix")
        self.replan()
