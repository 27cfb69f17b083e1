"""Tracebacks that rich prints in a box (HF accelerate and transformers, typer and Lightning CLIs) read as Python
prints them, line for line, so that every rule that reads frames reads them too.

    ╭──────────── Traceback (most recent call last) ────────────╮     Traceback (most recent call last):
    │ /work/train.py:12 in main                                  │  →    File "/work/train.py", line 12, in main
    │ ❱ 12 │   engine.step()                                       │         engine.step()
    ╰────────────────────────────────────────────────────────────╯
    RuntimeError: CUDA out of memory ...                               RuntimeError: CUDA out of memory ...

Context lines, locals panels and blank rows become empty lines (each line keeps its number); a row that rich
wrapped (a long path, a function name on the next row) is joined to the row after it.
"""
from __future__ import annotations

from gpudoctor.engine.lazyregex import LazyRegex as _lazy

_TOP = _lazy(r"(?P<pre>.*?)╭─+ ?Traceback \(most recent call last\) ?─+╮\s*$")
_ROW = _lazy(r"(?P<pre>.*?)│ (?P<body>.*?) ?│\s*$")
_BOTTOM = _lazy(r"(?P<pre>.*?)╰─+╯\s*$")
_FRAME = _lazy(r"(?P<path>\S.*?\.pyx?|<[^>]{1,200}>|\S.*?/[\w.-]+):(?P<line>\d{1,9}) in (?P<fn>\S+)\s*$")
_CODE = _lazy(r"❱ *\d+ │ ?(?P<code>.*?)\s*$")
_GUIDES = _lazy(r"^\s*(?:│\s*)+")  # rich's indentation guides inside a source line
MAX_BOX_LINES = 2000


def plain_tracebacks(lines: list[str]) -> list[str]:
    """lines with each rich traceback box rewritten as Python's own traceback (as many lines, in place)."""
    out = list(lines)
    i = 0
    while i < len(out):
        top = _TOP.match(out[i]) if "╭" in out[i] else None
        if top is None:
            i += 1
            continue
        pre = top.group("pre")
        out[i] = pre + "Traceback (most recent call last):"
        i = _rewrite_box(out, i + 1, pre)
    return out


def _rewrite_box(out: list[str], i: int, pre: str) -> int:
    """Rewrite the rows of one box from i; the index after its bottom edge."""
    end = min(len(out), i + MAX_BOX_LINES)
    at = None  # the line of the last frame not yet followed by its source line
    while i < end:
        line = out[i]
        if _BOTTOM.match(line):
            out[i] = pre
            return i + 1
        row = _ROW.match(line)
        if row is None:
            return i  # not a row of this box: rich's output was cut
        raw = row.group("body")
        body = raw.rstrip()
        frame = _FRAME.match(body)
        joined = None
        # a row rich wrapped: the function name moved to the next row ("... .py:960 in" / "forward"), or a path
        # folded at the box's edge (the row is full: no blank before its border)
        wrapped = body.endswith(" in") or (body and raw == body and frame is None)
        if wrapped and i + 1 < end:
            nxt = _ROW.match(out[i + 1])
            if nxt is not None and nxt.group("body").strip():
                glue = " " if body.endswith(" in") else ""
                joined = _FRAME.match(body + glue + nxt.group("body").strip())
        if frame is not None or joined is not None:
            m = frame or joined
            if joined is not None:
                out[i] = pre
                i += 1
            out[i] = f'{pre}  File "{m.group("path")}", line {m.group("line")}, in {m.group("fn")}'
            at = i  # where the frame line stands: moved down to sit right above its source line
        else:
            code = _CODE.match(body.lstrip())
            out[i] = f"{pre}    {_GUIDES.sub('', code.group('code')).strip()}" if code else pre
            if code and at is not None and at < i - 1:
                out[i - 1], out[at] = out[at], pre  # rich's context lines in between are empty now
            if code:
                at = None
        i += 1
    return i
