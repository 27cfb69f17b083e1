"""Open logs: pick a file or a directory of per-rank logs, type a path, or paste log text."""
from __future__ import annotations

from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DirectoryTree, Input, Label, TabbedContent, TabPane, TextArea


class OpenScreen(ModalScreen[list[str] | None]):
    """Dismisses with the paths to read, or None. Pasted text is handed back as the key "text" via `pasted`."""

    AUTO_FOCUS = "#open-path"
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "accept", "Open", priority=True)]

    def __init__(self, root: Path, title: str = "") -> None:
        super().__init__()
        self.root = root
        self.title_text = title  # "Lint a script": one path, no paste tab
        self.pasted: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="open-dialog"):
            with TabbedContent(id="open-tabs"):
                with TabPane(self.title_text or "File or folder", id="tab-pick"):
                    yield Input(str(self.root), placeholder="a log file, a directory of per-rank logs, a .gz",
                                id="open-path")
                    yield DirectoryTree(self.root if self.root.is_dir() else self.root.parent, id="open-tree")
                with TabPane("Paste text", id="tab-paste", disabled=bool(self.title_text)):
                    yield TextArea(id="open-text", soft_wrap=False)
            with Horizontal(id="open-buttons"):
                yield Label("enter or ctrl+s opens; a folder: every log", id="open-hint")
                yield Button("Open", id="open-ok", variant="primary", compact=True)
                yield Button("Cancel", id="open-cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#open-path", Input).focus()

    @on(TabbedContent.TabActivated)
    def tab_changed(self, event: TabbedContent.TabActivated) -> None:
        target = "#open-text" if event.pane.id == "tab-paste" else "#open-path"
        # after the refresh: the pane just shown cannot take focus before it is displayed
        self.call_after_refresh(self.query_one(target).focus)
        hint = "ctrl+s opens the pasted text" if event.pane.id == "tab-paste" else "enter or ctrl+s opens; a folder: every log"
        self.query_one("#open-hint", Label).update(hint)

    @on(DirectoryTree.FileSelected)
    @on(DirectoryTree.DirectorySelected)
    def picked(self, event) -> None:
        self.query_one("#open-path", Input).value = str(event.path)

    @on(Input.Submitted, "#open-path")
    @on(Button.Pressed, "#open-ok")
    def action_accept(self) -> None:
        tabs = self.query_one("#open-tabs", TabbedContent)
        if tabs.active == "tab-paste":
            text = self.query_one("#open-text", TextArea).text
            if not text.strip():
                self.notify("paste some log text first", severity="warning")
                return
            self.pasted = text
            self.dismiss(None)
            self.app.push_screen(_pasted_screen(text))
            return
        path = self.query_one("#open-path", Input).value.strip()
        if not path:
            self.notify("give a path", severity="warning")
            return
        self.dismiss([path])

    @on(Button.Pressed, "#open-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


def _pasted_screen(text: str):
    from gpudoctor.tui.screens.logs import LogScreen

    return LogScreen(text=text)
