"""A virtualised log view: only the visible lines of a memory-mapped file are read and rendered."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gpudoctor.engine.display import clean_for_display

CACHE_LINES = 2_000  # lines kept decoded; a screenful is read at a time
FETCH = 200


class LogView(ScrollView, can_focus=True):
    """Shows a LogFile; evidence lines (1-based, as the diagnosis reports them) are highlighted."""

    COMPONENT_CLASSES = {"logview--gutter", "logview--evidence", "logview--cursor", "logview--cursor-evidence"}
    DEFAULT_CSS = """
    LogView { background: $surface; overflow-x: scroll; overflow-y: scroll; }  /* fixed bars: the view never changes size under a jump */
    LogView > .logview--gutter { color: $text-muted; }
    LogView > .logview--evidence { background: $warning 35%; color: $foreground; text-style: bold; }
    LogView > .logview--cursor { background: $accent 35%; color: $foreground; }
    LogView > .logview--cursor-evidence { background: $accent 60%; color: $foreground; text-style: bold; }
    """
    BINDINGS = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "cursor_page(-1)", show=False),
        Binding("pagedown", "cursor_page(1)", show=False),
        Binding("home", "cursor_to(1)", "Top", show=False),
        Binding("end", "cursor_end", "End", show=False),
        Binding("g", "cursor_to(1)", show=False),
        Binding("G", "cursor_end", show=False),
    ]

    cursor = reactive(1)  # 1-based line under the cursor

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.logfile = None
        self.lines_known = 0
        self.evidence: set[int] = set()
        self._cache: dict[int, str] = {}
        self._widest = 0
        self.follow = False  # after a jump, keep the cursor line in view while the layout settles
        self.rendered_lines: list[int] = []  # 1-based numbers of the lines the last frame drew (tests read it)

    # --- the model ---------------------------------------------------------
    def show_file(self, logfile, evidence: set[int] | None = None) -> None:
        self.logfile = logfile
        self.evidence = set(evidence or ())
        self._cache.clear()
        self._widest = 0
        self.lines_known = logfile.known_lines if logfile else 0
        self.cursor = 1
        self.scroll_to(0, 0, animate=False)
        self._resize()

    def grow(self, lines: int) -> None:
        """More of the file is indexed: extend the scrollable height."""
        if lines != self.lines_known:
            self.lines_known = lines
            self._resize()

    def _resize(self) -> None:
        gutter = len(str(max(self.lines_known, 1))) + 1
        width = max(self._widest + gutter + 1, 1)
        size = Size(width, self.lines_known)
        if size != self.virtual_size:
            self.virtual_size = size
            if self.follow:  # a scrollbar that appears shrinks the view: place the jumped-to line again
                self.call_after_refresh(self._place, self.cursor)
        self.refresh()

    def _line(self, index: int) -> str:
        text = self._cache.get(index)
        if text is None:
            if len(self._cache) > CACHE_LINES:
                self._cache.clear()
            first = max(0, index - FETCH // 4)
            for n, raw in enumerate(self.logfile.lines(first, FETCH)):
                self._cache[first + n] = clean_for_display(raw).expandtabs(4)
            text = self._cache.get(index, "")
        return text

    # --- rendering: only the rows on screen --------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        if self.logfile is None or index >= self.lines_known:
            return Strip.blank(width, self.rich_style)
        number = index + 1
        if y == 0:
            self.rendered_lines = []
        self.rendered_lines.append(number)
        text = self._line(index)
        if len(text) > self._widest:
            self._widest = len(text)
            self.call_later(self._resize)
        gutter_w = len(str(max(self.lines_known, 1)))
        style = self.get_component_rich_style
        if number == self.cursor and number in self.evidence:
            line_style = style("logview--cursor-evidence")
        elif number == self.cursor and self.has_focus:
            line_style = style("logview--cursor")
        elif number in self.evidence:
            line_style = style("logview--evidence")
        else:
            line_style = Style()
        gutter = Segment(f"{number:>{gutter_w}} ", style("logview--gutter", partial=True))
        strip = Strip([gutter, Segment(text, line_style)])  # text is sanitised: no markup, no control codes
        if scroll_x:
            strip = strip.crop(scroll_x, scroll_x + width)
        return strip.extend_cell_length(width, line_style).crop(0, width)

    # --- moving ------------------------------------------------------------
    def watch_cursor(self, old: int, new: int) -> None:
        self.refresh()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def jump_to(self, line: int) -> None:
        """Put a 1-based line under the cursor, a third of the way down the view."""
        line = max(1, min(line, max(self.lines_known, 1)))
        self.cursor = line
        self.follow = True
        self._place(line)
        self.call_after_refresh(self._place, line)  # the new height may not be laid out yet

    def _place(self, line: int) -> None:
        if self.follow and line == self.cursor:
            top = max(0, line - 1 - self.scrollable_content_region.height // 3)
            self.scroll_to(0, top, animate=False, immediate=True)

    def on_resize(self) -> None:
        if self.follow:  # the panes around it settled after the jump: a third of the way down again
            self.call_after_refresh(self._place, self.cursor)

    def on_mouse_scroll_down(self) -> None:
        self.follow = False

    def on_mouse_scroll_up(self) -> None:
        self.follow = False

    def action_cursor(self, delta: int) -> None:
        self.follow = False
        self._keep_visible(self.cursor + delta)

    def action_cursor_page(self, direction: int) -> None:
        self._keep_visible(self.cursor + direction * max(1, self.scrollable_content_region.height - 1))

    def action_cursor_to(self, line: int) -> None:
        self._keep_visible(line)

    def action_cursor_end(self) -> None:
        self._keep_visible(self.lines_known)

    def _keep_visible(self, line: int) -> None:
        line = max(1, min(line, max(self.lines_known, 1)))
        self.cursor = line
        height = self.scrollable_content_region.height
        top = int(self.scroll_offset.y)
        if line - 1 < top:
            self.scroll_to(y=line - 1, animate=False, immediate=True)
        elif line - 1 >= top + height:
            self.scroll_to(y=line - height, animate=False, immediate=True)

    def on_click(self, event) -> None:
        offset = event.get_content_offset(self)
        if offset is not None and self.logfile is not None:
            self.cursor = min(self.lines_known, int(self.scroll_offset.y) + offset.y + 1)
