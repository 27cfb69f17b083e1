"""Tracebacks in other printers' forms read as Python prints them, line for line, so that every rule that reads
frames reads them too: rich's box (HF accelerate and transformers, typer and Lightning CLIs) and IPython's
(Jupyter, accelerate's notebook_launcher).

    ╭──────────── Traceback (most recent call last) ────────────╮     Traceback (most recent call last):
    │ /work/train.py:12 in main                                  │  →    File "/work/train.py", line 12, in main
    │ ❱ 12 │   engine.step()                                       │         engine.step()
    ╰────────────────────────────────────────────────────────────╯
    RuntimeError: CUDA out of memory ...                               RuntimeError: CUDA out of memory ...

Context lines, locals panels and blank rows become empty lines (each line keeps its number); a row that rich
wrapped (a long path, a function name on the next row) is joined to the row after it.

    RuntimeError          Traceback (most recent call last)        Traceback (most recent call last):
    Cell In[4], line 3                                         →     File "Cell In[4]", line 3, in <module>
    ----> 3 notebook_launcher(train, num_processes=2)                  notebook_launcher(train, num_processes=2)
    File /x/launchers.py:186, in launch(function, ...)                File "/x/launchers.py", line 186, in launch
    (IPython 7: "/x/launchers.py in notebook_launcher(function, ...)", the line number from its "--> 186" arrow)
"""
from __future__ import annotations

import re

from gpudoctor.engine.display import strip_ansi
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

_TOP = _lazy(r"(?P<pre>.*?)╭─+ ?Traceback \(most recent call last\) ?─+╮\s*$")
_ROW = _lazy(r"(?P<pre>.*?)│ (?P<body>.*?) ?│\s*$")
_BOTTOM = _lazy(r"(?P<pre>.*?)╰─+╯\s*$")
_FRAME = _lazy(r"(?P<path>\S.*?\.pyx?|<[^>]{1,200}>|\S.*?/[\w.-]+):(?P<line>\d{1,9}) in (?P<fn>\S+)\s*$")
_CODE = _lazy(r"❱ *\d+ │ ?(?P<code>.*?)\s*$")
_GUIDES = _lazy(r"^\s*(?:│\s*)+")  # rich's indentation guides inside a source line
MAX_BOX_LINES = 2000
# IPython 7-8 (IPython/core/ultratb.py): the header names the exception type; frames and the arrowed source line
_IPY_HEAD = _lazy(r"(?P<pre>.*?)[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)?\s{2,}"
                  r"Traceback \(most recent call last\)\s*$")
_IPY_CELL = _lazy(r"(?:Cell (?P<cell>In ?\[\d*\]), line (?P<line>\d+)|"
                  r"(?P<input><ipython-input-[\w-]+>) in (?P<fn0>[\w.<>]+))")
_IPY_FILE = _lazy(r"(?:File )?(?P<path>(?:[A-Za-z]:)?[~/\\][^:\n]*?\.pyx?)(?::(?P<line>\d+))?,? in (?P<fn>[\w.<>]+)")
_IPY_ARROW = _lazy(r"-+>\s*(?P<line>\d+)\s?(?P<code>.*)$")
_IPY_CONTEXT = _lazy(r" {2,}\d+ | *\(\.\.\.\)\s*$")  # a source line around the arrowed one; IPython 8's elision
_FOREIGN = _lazy(r"╭─|\S {2,}Traceback \(most recent call last\)\s*$", re.MULTILINE)


def has_foreign(text: str) -> bool:
    """Whether text may hold a rich or IPython traceback (cheap: most logs have neither mark)."""
    return ("╭" in text or "  Traceback (most recent call last)" in text) and _FOREIGN.search(text) is not None


def plain_tracebacks(lines: list[str]) -> list[str]:
    """lines with each rich box or IPython traceback rewritten as Python's own traceback (as many lines, in
    place)."""
    out = [strip_ansi(line) for line in lines]
    i = 0
    while i < len(out):
        line = out[i]
        top = _TOP.match(line) if "╭" in line else None
        if top is not None:
            out[i] = top.group("pre") + "Traceback (most recent call last):"
            i = _rewrite_box(out, i + 1, top.group("pre"))
            continue
        ipy = _IPY_HEAD.match(line) if "Traceback (most recent call last)" in line else None
        if ipy is not None and not line.rstrip().endswith(":"):
            out[i] = ipy.group("pre") + "Traceback (most recent call last):"
            i = _rewrite_ipython(out, i + 1, ipy.group("pre"))
            continue
        i += 1
    return out


def _rewrite_ipython(out: list[str], i: int, pre: str) -> int:
    """Rewrite IPython's frames from i, up to the exception line (left as it is); the index of that line."""
    end = min(len(out), i + MAX_BOX_LINES)
    at = None  # the frame line of the frame being read (IPython 7 gives its number on the arrow line)
    while i < end:
        body = out[i][len(pre):] if out[i].startswith(pre) else out[i]
        stripped = body.strip()
        cell = _IPY_CELL.match(stripped)
        frame = None if cell else _IPY_FILE.match(stripped)
        arrow = None if not stripped.startswith("-") or stripped.startswith("-" * 9) else _IPY_ARROW.match(stripped)
        if cell or frame:
            m = cell or frame
            where = m.group("cell") or m.group("input") if cell else m.group("path")
            where = f"Cell {where}" if cell and m.group("cell") else where
            fn = "<module>" if cell and m.group("cell") else m.group("fn0") if cell else m.group("fn")
            at = (i, where, m.group("line"), fn)
            out[i] = f'{pre}  File "{where}", line {m.group("line") or 0}, in {fn}'
        elif arrow is not None:
            out[i] = f"{pre}    {arrow.group('code').strip()}"
            if at is not None and at[2] is None:  # IPython 7: the number is the arrow's
                out[at[0]] = f'{pre}  File "{at[1]}", line {arrow.group("line")}, in {at[3]}'
            if at is not None and at[0] < i - 1:
                out[i - 1], out[at[0]] = out[at[0]], pre
            at = None
        elif not stripped or stripped.startswith("-----") or _IPY_CONTEXT.match(body):
            out[i] = pre
        else:
            return i  # the exception line, or what follows a cut paste
        i += 1
    return i


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
