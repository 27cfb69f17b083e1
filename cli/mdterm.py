"""Draw parsed Markdown blocks for a terminal of a given width: wrapped prose, lists, code, tables."""
from __future__ import annotations

import re
from typing import Callable

Styler = Callable[..., str]
_SPLIT = re.compile(r"(\s+)")


def _words(runs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Group inline runs into words: a word is a list of (text, style) fragments with no space inside."""
    words: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    for text, style in runs:
        if style.startswith("link:"):
            url = style[5:]
            style = "underline"
            if url and url != text and not url.startswith("#"):
                text = f"{text} ({url})"
        for piece in _SPLIT.split(text):
            if not piece:
                continue
            if piece.isspace():
                if current:
                    words.append(current)
                    current = []
                if "\n" in piece:
                    words.append([("\n", "")])
            else:
                current.append((piece, style))
    if current:
        words.append(current)
    return words


def _length(word: list[tuple[str, str]]) -> int:
    return sum(len(t) for t, _ in word)


def _draw(word: list[tuple[str, str]], style: Styler) -> str:
    names = {"code": ("code",), "bold": ("bold",), "italic": ("italic",), "underline": ("underline",)}
    return "".join(style(t, *names.get(s, ())) for t, s in word)


def wrap_runs(runs: list[tuple[str, str]], width: int, style: Styler) -> list[str]:
    """Greedy word wrap by visible width; words longer than a line are cut."""
    width = max(width, 10)
    lines: list[str] = []
    line, used = "", 0
    for word in _words(runs):
        if word == [("\n", "")]:
            lines.append(line)
            line, used = "", 0
            continue
        n = _length(word)
        if n > width and word[0][0].startswith(("http://", "https://")):
            # a long URL stays whole on its own line so that terminals can still open it
            if used:
                lines.append(line)
            lines.append(_draw(word, style))
            line, used = "", 0
            continue
        while n > width:  # an unbreakable token (a URL, a long path): cut it
            if used:
                lines.append(line)
                line, used = "", 0
            text = "".join(t for t, _ in word)
            s = word[0][1]
            lines.append(_draw([(text[:width], s)], style))
            word, n = [(text[width:], s)], n - width
        if used and used + 1 + n > width:
            lines.append(line)
            line, used = "", 0
        line += (" " if used else "") + _draw(word, style)
        used += (1 if used else 0) + n
    if used or not lines:
        lines.append(line)
    return lines


class TermRenderer:
    def __init__(self, width: int, style: Styler, unicode: bool = True):
        self.width = width
        self.style = style
        self.bullet = "•" if unicode else "-"
        self.hline = "─" if unicode else "-"
        self.vline = "│" if unicode else "|"
        self.cross = "┼" if unicode else "+"

    def render(self, blocks: list[tuple]) -> list[str]:
        lines = self._blocks(blocks, self.width)
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def _blocks(self, blocks: list[tuple], width: int) -> list[str]:
        out: list[str] = []
        for i, block in enumerate(blocks):
            kind = block[0]
            if kind == "heading":
                text = "".join(t for t, _ in block[2])
                if out and out[-1] != "":
                    out.append("")
                if block[1] == 1:
                    for ln in wrap_runs([(text, "")], width, lambda t, *a: t):
                        out.append(self.style(ln, "heading"))
                    out.append(self.style(self.hline * min(width, len(text)), "heading"))
                else:
                    out.append(self.style(text, "bold", "underline") if block[1] == 2 else self.style(text, "bold"))
            elif kind == "para":
                out += wrap_runs(block[1], width, self.style)
                out.append("")
            elif kind == "code":
                for ln in block[2].splitlines() or [""]:
                    out.append("  " + self.style(ln, "code"))
                out.append("")
            elif kind == "list":
                out += self._list(block, width)
                out.append("")
            elif kind == "table":
                out += self._table(block[1], block[2], width)
                out.append("")
            elif kind == "quote":
                out += ["  " + self.style(self.vline, "dim") + " " + ln for ln in self._blocks(block[1], width - 4)]
            elif kind == "rule":
                out += [self.style(self.hline * width, "dim"), ""]
        return out

    def _list(self, block: tuple, width: int) -> list[str]:
        _, ordered, start, items = block
        out: list[str] = []
        marks = [f"{n}." for n in range(start, start + len(items))] if ordered else [self.bullet] * len(items)
        pad = max((len(m) for m in marks), default=1) + 1
        for mark, item in zip(marks, items):
            body = self._blocks(item, width - pad)
            while body and body[-1] == "":
                body.pop()
            tight = [ln for ln in body]
            for j, ln in enumerate(tight or [""]):
                lead = mark.ljust(pad) if j == 0 else " " * pad
                out.append((lead + ln) if ln else "")
            if len(item) > 1:  # a step with code reads better with air after it
                out.append("")
        while out and out[-1] == "":
            out.pop()
        return out

    def _table(self, header: list, rows: list, width: int) -> list[str]:
        ncols = max([len(header)] + [len(r) for r in rows]) if (header or rows) else 0
        if not ncols:
            return []
        grid = [header + [[]] * (ncols - len(header))] + [r + [[]] * (ncols - len(r)) for r in rows]
        plain = [["".join(t for t, _ in cell) for cell in row] for row in grid]
        natural = [max(len(row[c]) for row in plain) for c in range(ncols)]
        longest_word = [max((len(w) for row in plain for w in row[c].split()), default=1) for c in range(ncols)]
        sep = 3  # " │ "
        avail = width - sep * (ncols - 1)
        widths = natural[:]
        floors = [min(w, 12) for w in longest_word]
        while sum(widths) > avail and max(widths) > 4:
            # shrink where it costs least: columns still above their longest word first
            slack = [widths[k] - floors[k] for k in range(ncols)]
            c = max(range(ncols), key=lambda k: (slack[k] > 0, widths[k]))
            widths[c] -= 1
        out: list[str] = []
        for r, row in enumerate(grid):
            cells = [wrap_runs(cell, widths[c], self.style) for c, cell in enumerate(row)]
            height = max(len(cl) for cl in cells)
            for k in range(height):
                parts = []
                for c, cl in enumerate(cells):
                    text = cl[k] if k < len(cl) else ""
                    visible = len(_strip(text))
                    if r == 0:
                        text = self.style(_strip(text), "bold")
                    parts.append(text + " " * (widths[c] - visible))
                out.append((" " + self.vline + " ").join(parts).rstrip())
            if r == 0:
                out.append((self.hline + self.cross + self.hline).join(self.hline * w for w in widths))
        return out


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _strip(text: str) -> str:
    return _ANSI.sub("", text)
