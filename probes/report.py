"""How probe results read on a terminal: one row per probe (word, id, reason) that fits the width, then evidence."""
from __future__ import annotations

import textwrap

from gpudoctor.probes.base import Result, Status

# (row word, style name the caller's output object knows)
WORDS = {
    Status.RULED_OUT: ("pass", "ok"),
    Status.CONFIRMED: ("fail", "fail"),
    Status.INCONCLUSIVE: ("warn", "bold"),
    Status.SKIPPED: ("skip", "skip"),
    Status.ERRORED: ("error", "fail"),
}
ID_WIDTH = 11
INDENT = " " * 6


def shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(0, width - 3)].rstrip() + "..."


def row(out, word: str, style: str, ident: str, text: str) -> str:
    """`word  ident  text`, the text cut to the terminal width (80 columns by default)."""
    from gpudoctor.engine.display import clean_for_display as sanitize

    prefix_len = 6 + ID_WIDTH + 1
    body = shorten(sanitize(text), max(10, out.width - prefix_len))
    return f"{out.style(f'{word:<5}', style)} {out.style(f'{ident:<{ID_WIDTH}}', 'id')} {body}"


def result_row(out, result: Result, ident: str | None = None) -> str:
    word, style = WORDS[result.status]
    return row(out, word, style, ident or result.probe, result.summary)


def evidence_lines(out, result: Result, entry_titles: dict[str, str] | None = None) -> list[str]:
    """The evidence under a row, wrapped to the width; tables (lines that start with spaces) kept whole."""
    from gpudoctor.engine.display import clean_for_display as sanitize

    width = max(20, out.width - len(INDENT))
    lines = []
    for line in result.evidence:
        line = sanitize(line)
        if line.startswith("  ") or len(line) <= width:
            lines.append(INDENT + line[:width])
        else:
            lines += [INDENT + part for part in textwrap.wrap(line, width, subsequent_indent="  ",
                                                              break_on_hyphens=False)]
    if result.entries:
        named = [f"{e} {entry_titles[e]}" if entry_titles and entry_titles.get(e) else e for e in result.entries]
        verb = {Status.CONFIRMED: "confirms", Status.RULED_OUT: "rules out"}.get(result.status, "about")
        text = f"{verb} {'; '.join(named)}"
        lines += [INDENT + out.style(part, "dim") for part in textwrap.wrap(text, width, subsequent_indent="  ",
                                                                           break_on_hyphens=False)]
    return lines


def counts(results: list[Result]) -> str:
    tally: dict[str, int] = {}
    for result in results:
        word = WORDS[result.status][0]
        tally[word] = tally.get(word, 0) + 1
    return ", ".join(f"{n} {w}" for w, n in tally.items())
