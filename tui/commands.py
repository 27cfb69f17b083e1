"""The command palette's gpudoctor commands: every entry by id or title, open logs, run the check, theme."""
from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider


class GpuDoctorCommands(Provider):
    def _commands(self):
        app = self.app
        yield "Open logs…", app.action_open_logs, "pick a log file or a directory of per-rank logs, or paste text"
        yield "Run every probe (check)", app.action_run_check, "all probes on this machine, live"
        yield "Dump the stacks of a running job", app.action_dump_stacks, "py-spy on each rank here, then the diagnosis"
        if app.lint_available:
            yield "Lint a training script…", app.action_lint_script, "its findings inline, each with its entry and fix"
        yield "Toggle dark / light theme", app.action_toggle_theme, "ctrl+t"
        yield "Help", app.action_help, "keys and flows"
        for entry in app.catalog:
            yield f"{entry.id} {entry.title}", partial(app.open_entry, entry.id), f"open entry {entry.id}"

    async def discover(self) -> Hits:
        for n, (text, command, help_text) in enumerate(self._commands()):
            if n >= 4:
                break
            yield DiscoveryHit(text, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, command, help_text in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), command, help=help_text)
