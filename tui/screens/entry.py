"""One catalogue entry as Markdown (the text `show --markdown` prints), related entries as links, probes and fixes as actions."""
from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Label, Markdown


class EntryScreen(Screen):
    AUTO_FOCUS = "#entry-body"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("p", "probes", "Run probes"),
        Binding("f", "fix", "Fix"),
        Binding("r", "focus_related", "Related"),
    ]

    def __init__(self, entry_id: str) -> None:
        super().__init__()
        self.entry = None
        self.entry_id = entry_id

    def compose(self) -> ComposeResult:
        catalog = self.app.catalog
        self.entry = entry = catalog.entries[self.entry_id]
        yield Header()
        with VerticalScroll(id="entry-body"):
            yield Markdown(catalog.markdown(entry), id="entry-md", open_links=False)
        with Horizontal(id="entry-actions"):
            if entry.related:
                yield Label("related:", classes="bar-label")
                for rel in entry.related:
                    yield Button(rel.id, id=f"rel-{rel.id}", classes="link", compact=True,
                                 tooltip=self.app.catalog.titles().get(rel.id, rel.why))
            if entry.probes:
                yield Button(f"probe: {', '.join(entry.probes)}", id="run-probes", classes="action", compact=True)
            if entry.fix_actions and self.app.fixes_available:
                yield Button("fix", id="open-fix", classes="action", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"{self.entry.id} · {self.entry.section}"
        self.query_one("#entry-body").focus()

    @property
    def markdown_source(self) -> str:
        return self.query_one("#entry-md", Markdown).source

    @on(Button.Pressed, ".link")
    def related(self, event: Button.Pressed) -> None:
        self.app.open_entry(str(event.button.label))

    @on(Button.Pressed, "#run-probes")
    def action_probes(self) -> None:
        if not self.entry.probes:
            self.notify(f"no probe confirms {self.entry.id}", severity="warning")
            return
        self.app.run_probes(list(self.entry.probes), self.entry.id)

    @on(Button.Pressed, "#open-fix")
    def action_fix(self) -> None:
        if not self.app.fixes_available or not self.entry.fix_actions:
            self.notify(f"{self.entry.id} has no executable fix; its steps are above", severity="warning")
            return
        self.app.open_fix(self.entry.id)

    def action_focus_related(self) -> None:
        buttons = self.query(".link")
        if buttons:
            buttons.first().focus()

    def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        href = event.href
        if self.app.catalog.get(href) is not None:
            self.app.open_entry(href)
        else:
            self.notify(href, title="link", timeout=10)
