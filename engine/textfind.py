"""Lines of a whole text found by a literal with str.find: rules read kept logs of up to 16 MiB, where neither a
split of the whole text nor a regex per line is needed. Lines are counted by newline, as the scanner counts them."""
from __future__ import annotations


def line_at(text: str, offset: int) -> tuple[int, str]:
    """(line number, the line without its line ending) of the line that holds offset."""
    return text.count("\n", 0, offset) + 1, line_text(text, offset)


def line_text(text: str, offset: int) -> str:
    """The line that holds offset, without its line ending (no count of the lines before: cheap to call often)."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return text[start:len(text) if end < 0 else end].rstrip("\r")


def lines_with(text: str, word: str, keep=None):  # (no typing import: start-up stays lean)
    """(line number, line) of each line that holds word, once per line, where keep(text, offset of word) agrees."""
    at, line_no, counted = text.find(word), 1, 0
    while at >= 0:
        if keep is not None and not keep(text, at):
            at = text.find(word, at + len(word))
            continue
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line_no += text.count("\n", counted, start)
        counted = start
        yield line_no, text[start:end].rstrip("\r")
        at = text.find(word, end)
