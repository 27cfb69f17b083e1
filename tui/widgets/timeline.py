"""One bar per rank: how far each got (last collective or last line), where it stopped, who died first or lagged."""
from __future__ import annotations

import re

from rich.text import Text
from textual.widget import Widget

_FIRST = re.compile(r"\brank (\d+) failed first\b")
_MARKS = {"died": ("✗", "bold red"), "behind": ("◀", "bold yellow"), "desync": ("≠", "bold magenta"),
          "waiting": ("…", "dim"), "lost-peer": ("⇄", "dim"), "stopped": ("■", "dim"), "missing": ("?", "red"), "no-init": ("?", "yellow"),
          "ok": ("", "")}


def first_to_die(verdict: list[str]) -> int | None:
    for line in verdict:
        m = _FIRST.search(line)
        if m:
            return int(m.group(1))
    return None


def rank_rows(ranks: list, verdict: list[str]) -> list[dict]:
    """Per rank: progress 0..1, what it last did, and its mark; collectives when every rank counts them."""
    first = first_to_die(verdict)
    by_collective = bool(ranks) and all(r.last_completed is not None for r in ranks)
    positioned = by_collective or any(r.last_line for r in ranks)
    if by_collective:
        top = max(r.last_completed for r in ranks) or 1
    else:
        top = max((r.last_line.line for r in ranks if r.last_line), default=1) or 1
    rows = []
    for r in sorted(ranks, key=lambda r: r.rank):
        reached = (r.last_completed or 0) if by_collective else (r.last_line.line if r.last_line else 0)
        where = r.timed_out_in or r.blocked_in or (f"#{r.last_completed}" if r.last_completed is not None else "")
        if not where and r.last_line:
            where = f"line {r.last_line.line}"
        note = {"died": "died", "behind": "laggard", "desync": "desync", "waiting": "timed out",
                "lost-peer": "lost peer", "stopped": "stopped (^C)", "missing": "no log", "no-init": "no init"}.get(r.status, "")
        if first is not None and r.rank == first:
            note = "died first"
        rows.append({"rank": r.rank, "progress": reached / top if positioned else None, "where": where, "status": r.status, "note": note,
                     "first": first is not None and r.rank == first})
    return rows


class RankTimeline(Widget):
    DEFAULT_CSS = """
    RankTimeline { height: auto; max-height: 10; overflow-y: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[dict] = []

    def set_ranks(self, ranks: list, verdict: list[str]) -> None:
        self.rows = rank_rows(ranks, verdict)
        self.display = len(self.rows) > 1
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width) -> int:
        return max(1, len(self.rows))

    def render(self) -> Text:
        width = self.size.width or 80
        label_w = max((len(f"rank {r['rank']}") for r in self.rows), default=6) + 1
        tail_w = 26
        bar_w = max(8, width - label_w - tail_w - 2)
        out = Text(no_wrap=True, overflow="ellipsis")
        for n, row in enumerate(self.rows):
            if n:
                out.append("\n")
            filled = round((row["progress"] or 0) * bar_w)
            mark, style = _MARKS.get(row["status"], ("", ""))
            if row["first"]:
                mark, style = "✗", "bold red"
            colour = "red" if row["status"] == "died" else "yellow" if row["status"] == "behind" else "green"
            out.append(f"{'rank ' + str(row['rank']):<{label_w}}")
            out.append("█" * filled, style=colour)
            out.append(("░" if row["progress"] is not None else " ") * (bar_w - filled), style="dim")
            out.append(f" {mark:1} ", style=style)
            tail = f"{row['where']} {row['note']}".strip()
            out.append(tail[:tail_w], style=style or "dim")
        return out
