"""The first screen: describe the symptom or paste an error, watch the catalogue rank itself as you type."""
from __future__ import annotations

import time

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, OptionList, Static
from textual.widgets.option_list import Option

from gpudoctor.tui.messages import SearchDone
from gpudoctor.tui.work import background

LIMIT = 30


def entry_option(entry, score: float | None = None, width: int = 80) -> Option:
    """One row per entry: a title cut to the width with "…" (a wrapped one ran on under the id column)."""
    head = f"{score:4.2f} " if score is not None else ""
    room = max(10, width - 6 - len(head) - 4)  # the id column, the list's padding and scroll bar
    title = entry.title if len(entry.title) <= room else entry.title[: room - 1].rstrip() + "…"
    return Option(Text.assemble((f"{entry.id:<5}", "bold"), " ", (head, "dim"), title), id=entry.id)


class SearchScreen(Screen):
    """Results update on every keystroke through the catalogue's own search (kb.search), typos tolerated."""

    AUTO_FOCUS = "#query"
    BINDINGS = [
        Binding("down", "focus_results", "Results", show=False),
        Binding("escape", "clear", "Clear"),
        Binding("enter", "open_selected", "Open entry", show=True, priority=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.query_text = ""
        self.shown_query = ""  # the query the list shows results for
        self.open_pending = False  # enter was pressed before the results for the typed query came in
        self.searching = False  # one search at a time: keystrokes typed meanwhile coalesce into the next
        self.painted_query = ""  # the query whose results are on screen (after the repaint)
        self.last_search_s: float | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="describe what you see, or paste an error line", id="query")
        yield OptionList(id="results")
        yield Static("", id="preview")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "search the catalogue"
        self.show_all()
        self.query_one("#query", Input).focus()

    def show_all(self) -> None:
        results = self.query_one("#results", OptionList)
        results.clear_options()
        results.add_options([entry_option(e, width=self.app.size.width) for e in self.app.catalog])
        results.highlighted = 0 if results.option_count else None
        self.query_one("#preview", Static).update(
            f"{len(self.app.catalog)} entries · type to search · ctrl+o opens a log · ctrl+r runs every probe")

    def _fill(self, hits) -> None:
        results = self.query_one("#results", OptionList)
        results.clear_options()
        entries = self.app.catalog.entries
        results.add_options([entry_option(entries[h.id], h.score, self.app.size.width) for h in hits
                             if h.id in entries])
        results.highlighted = 0 if results.option_count else None

    def on_resize(self, event) -> None:
        """The rows are cut to the width they were made for: remake them for the new one."""
        if event.size.width == getattr(self, "filled_width", event.size.width):
            self.filled_width = event.size.width
            return
        self.filled_width = event.size.width
        highlighted = self.query_one("#results", OptionList).highlighted
        if self.shown_query and getattr(self, "shown_hits", None) is not None:
            self._fill(self.shown_hits)
        elif not self.query_text:
            self.show_all()
        self.query_one("#results", OptionList).highlighted = highlighted

    @on(Input.Changed, "#query")
    def search(self, event: Input.Changed) -> None:
        query = event.value.strip()
        self.query_text = query
        if not query:
            self.shown_query = ""
            self.show_all()
            return
        if not self.searching:
            self.start_search(query)

    def start_search(self, query: str) -> None:
        catalog = self.app.catalog
        self.searching = True

        def run() -> None:
            from gpudoctor.commands.search import MIN_SCORE

            start = time.perf_counter()
            hits = [h for h in catalog.search_index().search(query, limit=LIMIT) if h.score >= MIN_SCORE]
            self.post_message(SearchDone(query, hits, time.perf_counter() - start))

        background(self, run, name="search", exclusive=False)

    def on_work_failed(self, message) -> None:
        self.searching = False

    def on_search_done(self, message: SearchDone) -> None:
        self.searching = False
        if message.query != self.query_text:
            if self.query_text:
                self.start_search(self.query_text)  # what was typed while this one ran
            return
        self.last_search_s = message.seconds
        self.shown_query = message.query
        self.shown_hits = message.hits
        self._fill(message.hits)
        self.call_after_refresh(setattr, self, "painted_query", message.query)
        preview = self.query_one("#preview", Static)
        if not message.hits:
            preview.update(Text(f"nothing matches {message.query!r}: try other words, or paste the first error line"))
        else:
            self.show_preview(message.hits[0].id)
        if self.open_pending:
            self.open_pending = False
            self.action_open_selected()

    @on(OptionList.OptionHighlighted, "#results")
    def highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id:
            self.show_preview(event.option.id)

    def show_preview(self, entry_id: str) -> None:
        entry = self.app.catalog.entries.get(entry_id)
        if entry is not None:
            self.query_one("#preview", Static).update(Text(entry.summary))

    @on(OptionList.OptionSelected, "#results")
    def selected(self, event: OptionList.OptionSelected) -> None:
        self.app.open_entry(event.option.id)

    @on(Input.Submitted, "#query")
    def submitted(self) -> None:
        self.action_open_selected()

    def action_open_selected(self) -> None:
        if self.shown_query != self.query_text:
            self.open_pending = True  # open the best result for what was typed, not the stale list
            return
        results = self.query_one("#results", OptionList)
        if results.highlighted is not None:
            self.app.open_entry(results.get_option_at_index(results.highlighted).id)

    def action_focus_results(self) -> None:
        self.query_one("#results", OptionList).focus()

    def action_clear(self) -> None:
        query = self.query_one("#query", Input)
        query.value = ""
        query.focus()

    @property
    def result_ids(self) -> list[str]:
        results = self.query_one("#results", OptionList)
        return [results.get_option_at_index(i).id for i in range(results.option_count)]
