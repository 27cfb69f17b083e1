"""Read Python tracebacks (chained exceptions, faulthandler dumps) out of a window of log lines."""
from __future__ import annotations

import re

from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.prefix import LinePrefix, parse_prefix
from gpudoctor.kb.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs every run start-up time
    from collections.abc import Iterable, Sequence

__all__ = ["Frame", "RaisedException", "TracebackInfo", "parse_traceback", "parse_tracebacks", "is_user_path"]

# Python prints at most this many lines of an exception message in practice; a
# cap keeps a missing terminator from swallowing the rest of a window.
_MAX_MESSAGE_LINES = 60
_MAX_MESSAGE_CHARS = 16_384
# RecursionError tracebacks are folded by "[Previous line repeated N more times]", so real
# ones stay far below this; it bounds the scan when a window holds many cut-off headers.
_MAX_TRACEBACK_LINES = 5_000


@record(frozen=True)
class Frame:
    """One stack frame: of a Python traceback, a faulthandler dump or a flight-recorder entry."""

    file: str
    line: int | None  # None when a flight-recorder frame gave none
    function: str | None  # None for SyntaxError-style frames
    source: str | None  # the code line Python showed under the frame
    is_user: bool  # not site-packages, the stdlib, torch itself or a launcher shim


@record(frozen=True)
class RaisedException:
    exc_type: str  # "" when the window ended before the exception line
    message: str
    frames: tuple[Frame, ...]
    link: str | None  # how the previous exception led here: "cause" (raise from), "context" (during handling)


@record(frozen=True)
class TracebackInfo:
    """One printed exception chain, root first. The top-level fields describe the last (raised) one."""

    exc_type: str
    message: str
    frames: tuple[Frame, ...]
    chain: tuple[RaisedException, ...]
    start: int  # index into the given lines of the first "Traceback" line
    end: int  # index after the last line read
    rank: int | None = None  # from the prefixes of the header line, when there were any
    local_rank: int | None = None

    @property
    def root(self) -> RaisedException:
        return self.chain[0]

    @property
    def user_frames(self) -> tuple[Frame, ...]:
        return tuple(f for f in self.frames if f.is_user)

    @property
    def blame(self) -> Frame | None:
        """The innermost user frame of the last exception, else of any in the chain."""
        for exc in reversed(self.chain):
            for frame in reversed(exc.frames):
                if frame.is_user:
                    return frame
        return None


# torchelastic's failure summary embeds the worker's traceback as "  traceback : Traceback ..."
# (a terminal's echo of Ctrl-C, "^C", often runs into the header of the KeyboardInterrupt it raised; a pane copied
# out of tmux or an IDE can end every line with the border "│")
_TB_HEADER = _lazy(r"([ \t]*)(?:\^C)?(?:traceback\s*: )?Traceback \(most recent call last\):\s*(?:│\s*)?$")
_FRAME = _lazy(r'[ \t]*File "([^"]{1,4096})", line (\d{1,9})(?:,? in (.{1,500}?))?\s*$')
_EXC_LINE = _lazy(r"([A-Za-z_][\w.]{0,300})(?:: ?(.*))?$")
_CARETS = _lazy(r"[ \t]*[\^~]+[ \t]*$")
_CHAIN = {
    "The above exception was the direct cause of the following exception:": "cause",
    "During handling of the above exception, another exception occurred:": "context",
}
_FAULT_HEADER = _lazy(r"[ \t]*(?:Current thread|Thread) 0x[0-9a-fA-F]{1,16} \(most recent call first\):")
_FATAL = _lazy(r"Fatal Python error: (.{0,500})")
_STDLIB = _lazy(r"/lib(?:64)?/(?:python|pypy)\d|/python\d[\d.]*/lib/", re.IGNORECASE)
_NOT_USER = (
    "site-packages/",
    "dist-packages/",
    "/torch/",
    "<frozen ",
    "<string>",
    "importlib._bootstrap",
    "/bin/torchrun",
)


def is_user_path(path: str) -> bool:
    """Whether a traceback frame's file is the user's own code."""
    norm = path.replace("\\", "/")
    if any(marker in norm for marker in _NOT_USER) or _STDLIB.search(norm):
        return False
    # console-script shims in an env's bin/ (torchrun, deepspeed, accelerate) have no .py suffix
    return not ("/bin/" in norm and not norm.endswith(".py"))


def _signature(p: LinePrefix) -> tuple:
    # Lines printed by the same process carry the same prefix shape; a change means another
    # process (interleaved ranks) or a new log record (a glog/logging line) started.
    return (p.kinds, p.rank, p.local_rank, p.task, p.role, p.host, p.pid)


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


_RAISED_NAME = _lazy(r"(?:Error|Exception|Interrupt|Exit|Warning|Failure|Fault)$|\.")


def _looks_raised(text: str) -> bool:
    """Whether a line reads like the exception a traceback ends with ("RuntimeError: x", "KeyboardInterrupt",
    "torch.OutOfMemoryError"), not a source line ("main()", "loss.backward()")."""
    m = _EXC_LINE.match(text)
    return m is not None and (m.group(2) is not None or _RAISED_NAME.search(m.group(1)) is not None)


def _parse_one(parsed: Sequence[LinePrefix], h: int, sig: tuple, link: str | None) -> tuple[RaisedException, int]:
    base = _indent(parsed[h].body)
    frames: list[list] = []
    exc_type, message = "", ""
    after_frame = flat = False  # the last line of ours read was a frame line; frames stand at the header's indent
    i, n = h + 1, min(len(parsed), h + 1 + _MAX_TRACEBACK_LINES)
    while i < n:
        p = parsed[i]
        body = p.body
        if not body.strip():
            i += 1
            continue
        if _signature(p) != sig:
            i += 1  # another rank's line interleaved into ours
            continue
        m = _FRAME.match(body)
        if m:
            frames.append([m.group(1), int(m.group(2)), m.group(3), None])
            after_frame, flat = True, _indent(body) <= base
            i += 1
            continue
        if _TB_HEADER.match(body):
            break  # a new traceback started before this one printed its exception
        # a paste that lost its indentation (copied from a rendered page): the line right under a frame is that
        # frame's source unless it reads like a raised exception
        flat_source = after_frame and flat and _indent(body) <= base and not _looks_raised(body.strip())
        after_frame = False
        if _indent(body) > base or flat_source or (frames and _CARETS.match(body)):
            if frames and frames[-1][3] is None and not _CARETS.match(body) and "[Previous line repeated" not in body:
                frames[-1][3] = body.strip()
            i += 1
            continue
        text = body[min(base, _indent(body)) :]
        em = _EXC_LINE.match(text)
        exc_type, message = (em.group(1), em.group(2) or "") if em else ("", text)
        i += 1
        extra: list[str] = []
        while i < n and len(extra) < _MAX_MESSAGE_LINES:
            q = parsed[i]
            text = q.body
            if not text.strip() or _signature(q) != sig or _TB_HEADER.match(text) or text.strip() in _CHAIN:
                break
            extra.append(text[base:] if _indent(text) >= base else text)
            i += 1
        if extra:
            message = "\n".join([message.rstrip(), *extra]).strip("\n") if message.strip() else "\n".join(extra)
        break
    result = tuple(Frame(f, ln, fn, src, is_user_path(f)) for f, ln, fn, src in frames)
    return RaisedException(exc_type, message.rstrip()[:_MAX_MESSAGE_CHARS], result, link), i


def _next_meaningful(parsed: Sequence[LinePrefix], i: int, sig: tuple, limit: int = 8) -> int | None:
    """Index of the next non-blank line from the same process, looking a few lines ahead."""
    n = len(parsed)
    while i < n and limit > 0:
        p = parsed[i]
        if p.body.strip() and _signature(p) == sig:
            return i
        if p.body.strip():
            limit -= 1
        i += 1
    return None


def _parse_chain(parsed: Sequence[LinePrefix], start: int) -> tuple[TracebackInfo, list[int]]:
    sig = _signature(parsed[start])
    base = _indent(parsed[start].body)
    chain: list[RaisedException] = []
    headers = [start]
    h, link = start, None
    while True:
        exc, i = _parse_one(parsed, h, sig, link)
        chain.append(exc)
        end = i
        # a chain marker or header at another indent belongs to a traceback quoted inside a message
        j = _next_meaningful(parsed, i, sig)
        marker = parsed[j].body if j is not None else ""
        if j is None or _indent(marker) != base or marker.strip() not in _CHAIN:
            break
        link = _CHAIN[marker.strip()]
        k = _next_meaningful(parsed, j + 1, sig)
        if k is None or _indent(parsed[k].body) != base or not _TB_HEADER.match(parsed[k].body):
            break
        h = k
        headers.append(k)
    last = chain[-1]
    head = parsed[start]
    info = TracebackInfo(last.exc_type, last.message, last.frames, tuple(chain), start, end, head.rank, head.local_rank)
    return info, headers


def _parse_faulthandler(parsed: Sequence[LinePrefix], h: int) -> TracebackInfo:
    # faulthandler lists the innermost frame first; flip it to read like a traceback
    sig = _signature(parsed[h])
    frames: list[Frame] = []
    i = h + 1
    while i < len(parsed):
        m = _FRAME.match(parsed[i].body)
        if not m or _signature(parsed[i]) != sig:
            break
        frames.append(Frame(m.group(1), int(m.group(2)), m.group(3), None, is_user_path(m.group(1))))
        i += 1
    message = ""
    for back in range(h - 1, max(-1, h - 6), -1):
        fatal = _FATAL.search(parsed[back].body)
        if fatal:
            message = fatal.group(1).strip()
            break
    frames.reverse()
    exc = RaisedException("Fatal Python error", message, tuple(frames), None)
    return TracebackInfo(exc.exc_type, message, exc.frames, (exc,), h, i, parsed[h].rank, parsed[h].local_rank)


def parse_tracebacks(lines: Iterable[str]) -> list[TracebackInfo]:
    """Every exception chain (and faulthandler dump) in a window of lines, in order.

    Lines may be raw (prefixes are read here, which also separates interleaved ranks
    and stops a multi-line message at the next log record) or already-stripped bodies.
    """
    lines = list(lines)
    if any("╭" in line or "  Traceback (most recent call last)" in line for line in lines):
        from gpudoctor.engine.tbforms import has_foreign, plain_tracebacks

        if has_foreign("\n".join(lines)):  # rich's box, IPython's form: rewritten as Python prints them
            lines = plain_tracebacks(lines)
    parsed = [parse_prefix(line) for line in lines]
    found: list[TracebackInfo] = []
    chained: set[int] = set()  # headers already read as a later link of some chain
    for i, p in enumerate(parsed):
        body = p.body
        if "Traceback (most recent call last)" in body and i not in chained and _TB_HEADER.match(body):
            info, headers = _parse_chain(parsed, i)
            chained.update(headers)
            found.append(info)
        elif "(most recent call first)" in body and _FAULT_HEADER.match(body):
            found.append(_parse_faulthandler(parsed, i))
    return found


def parse_traceback(lines: Iterable[str]) -> TracebackInfo | None:
    """The first exception chain in a window of lines (see parse_tracebacks)."""
    found = parse_tracebacks(lines)
    return found[0] if found else None
