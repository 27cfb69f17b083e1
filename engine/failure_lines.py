"""The lines of a log that show the run failed: what the "possible" tier searches the catalogue with."""
from __future__ import annotations

import re

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

# a line that says something went wrong; the scanner's structural hits (exceptions, NCCL WARN,
# watchdog and gloo timeouts, signals, lost peers) count without it
_FAILURE = _lazy(
    r"\b(?:[A-Za-z]*(?:Error|Exception)|error|ERROR|fail(?:ed|ure|s)|FAIL(?:ED)?|fatal|FATAL|abort(?:ed|ing)?|"
    r"timed out|time ?out|timeout|[Kk]illed|exit ?code|exitcode|return code|refused|denied|invalid|[Uu]nable to|"
    r"[Cc]annot|can't|not found|[Nn]o such|mismatch(?:ed)?|unrecognized|deadlock|WARN|not permitted|"
    r"not supported|[Ee]xpected|\w*PAGE_FAULT)\b|DMAR: ?\[DMA (?:Read|Write)"
)
_COMMAND = _lazy(r"\s*(?:\$|\+|>>>|#|\w+@[\w.-]+:\S*[$#])\s")  # an echoed command line, not its output
_WARNING = _lazy(r"\b(?:WARNING|Warning|warning|[A-Z]\w*Warning)\b")
_FRAME_LINE = _lazy(r'\s*(?:\[[^\]]{1,40}\]:?\s*)?(?:File "[^"]*", line \d+|frame #\d+:|#\d+ 0x[0-9a-f]+ in )')
_STRUCT_FAILURES = ("exception", "nccl-warn", "watchdog", "gloo-timeout", "signal", "lost-peer", "mismatch")
# torchrun's own reaction to a Ctrl-C (the agent's "Received 2 death signal", its SIGINT to the workers, the SIGKILL
# it escalates to, the SignalException it raises): not the run's failure, which is whatever the ranks were doing
_STOPPED_BY_HAND = _lazy(r"Received 2 death signal|closing signal SIGINT\b|got signal: 2\b|raise SignalException\(|"
                         r"Unable to shutdown process \d+ via (?:2|Signals\.SIGINT)\b")
# torchrun's account of a worker's failure (the agent's "failed (exitcode: 1) local_rank: 0", its ChildFailedError and
# the summary block): an echo of the rank's own error, read only where no rank printed one (a rank killed silently)
_LAUNCHER_ECHO = _lazy(r"\bfailed \(exitcode: -?\d+\) local_rank: \d+|ChildFailedError|^\S+ FAILED\s*$|"
                       r"exitcode\s*: -?\d+ \(pid: \d+\)|closing signal SIGTERM\b|Root Cause \(first observed failure\)")
SHORT_INPUT = 2  # an input of at most this many lines is a pasted error: every line of it is a failure line
MAX_QUERY_CHARS = 400


def failure_lines(scans, patterns, texts: dict | None = None) -> list[Evidence]:
    """The lines that show the run failed, in file and line order (deduplicated by their wording).

    texts: the whole text of inputs small enough to keep; their every line is read, others only through
    the scanner's structural hits, its traceback windows and the last lines."""
    from gpudoctor.engine.patterns import STRUCT
    from gpudoctor.engine.prefix import parse_hit_prefix
    from gpudoctor.engine.rules import unwrapped

    texts = {name: unwrapped(text) for name, text in (texts or {}).items()}  # a wrapped paste, rows rejoined
    index = {p.name: p.index for p in patterns.patterns if p.owner == STRUCT}
    found: dict[tuple[str, int], str] = {}
    pasted: dict[tuple[str, int], str] = {}  # lines of a short paste that name no failure themselves
    cut: dict[tuple[str, int], str] = {}  # tracebacks cut before their error line: their innermost frames
    seen_shapes: set[str] = set()
    for source, scan in scans:
        name = scan.name
        for struct in _STRUCT_FAILURES:
            hits = scan.hits.get(index.get(struct, -1))
            if hits:
                for hit in hits.all():
                    found[(name, hit.line_no)] = hit.text
        short = 0 < scan.lines <= SHORT_INPUT
        whole = (texts or {}).get(name)
        for line_no, text in scan.tail:
            if _FAILURE.search(text) and not _COMMAND.match(text):
                found[(name, line_no)] = text
            elif short:
                pasted[(name, line_no)] = text
        for opener, line_no, lines in scan.windows:
            if opener != "traceback":
                continue
            last = _exception_line(lines)
            if last is not None:
                found[(name, line_no + last)] = lines[last]
            else:
                frames = frames_query(lines)
                before = _doing(lines[0]) if lines else ""
                if frames or before:
                    cut.setdefault((name, line_no), "; ".join(x for x in (before, frames) if x))
        if whole is not None:  # last: a whole text's lines come with the continuation of a wrapped message
            for line_no, text in _failure_lines_in(whole, seen_shapes):
                found[(name, line_no)] = text
    if found and not any(_FAILURE.search(t) or not _WARNING.search(t) for t in found.values()):
        found = {}  # warnings alone: a run that printed advice, not one that failed
    bodies = {k: parse_hit_prefix(t).body.strip() for k, t in found.items()}
    if any(not _LAUNCHER_ECHO.search(b) and not _STOPPED_BY_HAND.search(b) and not _FRAME_LINE.match(b)
           and _FAILURE.search(b) for b in bodies.values()):
        found = {k: t for k, t in found.items() if not _LAUNCHER_ECHO.search(bodies[k])}  # the ranks' own errors
    out, seen = [], set()
    both = {k: (t, "failure-line") for k, t in found.items()}
    both.update({k: (t, "pasted-line") for k, t in pasted.items() if k not in found})
    if not found and not cut:  # a stack dump (faulthandler) with no error: where the process was stopped
        for name, whole in (texts or {}).items():
            at = _DUMP_FRAME.search(whole) if '", line ' in whole else None
            if at is not None:
                line_no = whole.count("\n", 0, at.start()) + 1
                block = whole[at.start():].splitlines()[:FRAMES_KEPT * 4]
                frames = frames_query(block[::-1])  # a dump lists the innermost frame first
                if frames:
                    cut[(name, line_no)] = frames
    if not found:  # where the log names no failure, the frames a cut traceback stopped in are all there is
        both.update({k: (t, "cut-traceback") for k, t in cut.items()})
    for (file, line), (text, kind) in sorted(both.items()):
        body = " ".join(parse_hit_prefix(text).body.split())
        key = _DIGITS.sub("0", body)[:200]
        if not body or key in seen or _FRAME_LINE.match(body) or _STOPPED_BY_HAND.search(body):
            continue
        seen.add(key)
        out.append(Evidence(file, line, text, kind))
    return out


# every failure-looking line contains one of these (lower-cased); str.find over the text is far faster than a regex
_LITERALS = ("error", "exception", "fail", "fatal", "abort", "timed out", "timeout", "time out", "killed", "exit code",
             "exitcode", "return code", "refused", "denied", "invalid", "unable to", "cannot", "can't", "not found",
             "no such", "mismatch", "unrecognized", "deadlock", "warn", "not permitted", "not supported", "expected")
_DIGITS = _lazy(r"\d+")
MAX_SHAPES = 4000  # distinct failure-line shapes kept per run (a log that warns on every step repeats itself)
MAX_CANDIDATES = 200_000  # literal hits looked at per text


def _candidate_starts(text: str) -> list[int]:
    """Start offsets of the lines that hold a failure literal, in order."""
    lower = text.lower()
    starts: set[int] = set()
    for word in _LITERALS:
        at = lower.find(word)
        while at >= 0 and len(starts) < MAX_CANDIDATES:
            start = lower.rfind("\n", 0, at) + 1
            starts.add(start)
            end = lower.find("\n", at)
            if end < 0:
                break
            at = lower.find(word, end)
    return sorted(starts)


def _failure_lines_in(text: str, shapes: set[str]):
    """(line number, line) of each failure-looking line of a whole text, one per shape (digits aside), skipping
    traceback frames, the code lines under them and echoed commands."""
    line_no, counted = 1, 0
    for start in _candidate_starts(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end].rstrip("\r")
        line_no += text.count("\n", counted, start)
        counted = start
        shape = _DIGITS.sub("0", line[:200])
        if shape in shapes:
            continue
        if not (_FAILURE.search(line) or _WARNING.search(line)) or _COMMAND.match(line) or _FRAME_LINE.match(line):
            continue
        if start:
            prev = text[text.rfind("\n", 0, start - 1) + 1: start - 1]
            if _FRAME_LINE.match(prev):
                continue  # the code line Python prints under a frame: the user's source, not a message
        if len(shapes) < MAX_SHAPES:
            shapes.add(shape)
        yield line_no, _with_continuation(text, end, line)


# a Python frame (plain, IPython, Rich) or a C++ frame, and the function it names
_PY_FRAME = _lazy(r'(?:File "[^"]+", line \d+,? in |File [^\s"]+\.py:\d+, in |[\w./\\-]+\.py:\d+ in )([\w.<>]+)')
_CPP_FRAME = _lazy(r"frame #\d+: (?:c10d::|c10::|torch::)([\w:]+)")
# names that say nothing (their source line may: the call a constructor or main made) ...
_NOISE_FN = _lazy(r"^(?:<module>|main|__call__|__init__|run|_run|launch|.*::operator\(\))$")
# ... and wrappers, whose source line is the wrapping machinery itself ("return next(self.gen)")
_WRAPPER_FN = _lazy(r"^(?:__enter__|__exit__|_call_impl|_wrapped_call_impl|wrapper|inner|<lambda>|decorate_context|"
                         r"wrapped|new_func|_fn)$")
# faulthandler's dump frame (dump_frame() in Python/traceback.c: '  File "%U", line %d in %U', no comma before "in")
_DUMP_FRAME = _lazy(r'^\s*File "[^"]+", line \d+ in \w+', re.MULTILINE)
FRAMES_KEPT = 3  # innermost frames that name where a cut traceback stopped


_BAR = _lazy(r"\s*\d+%\|.*$|[\d/:<>,.\s]+(?:\[[^\]]*\])?\s*$")


def _doing(header: str) -> str:
    """What a progress bar on the traceback's header line said the process was doing ("Running tokenizer on
    dataset: 38%|###| 32068/85249 [32:13<53:59]Traceback ..."): the step that was under way when it failed."""
    from gpudoctor.engine.prefix import parse_prefix

    header = parse_prefix(header).body
    at = header.find("Traceback")
    if at <= 0:
        return ""
    text = header[max(0, at - 400):at]  # a progress bar's words sit just before the header
    text = text[text.rfind("\r") + 1:]
    text = _BAR.sub("", text).strip(" :|")
    return text[:120] if re.search(r"[A-Za-z]{3}", text) else ""


def frames_query(lines: list[str]) -> str:
    """The innermost frames of a traceback that was cut before its error line: their function names and the source
    lines under them ("the failure happened here" is all a cut paste still says)."""
    picked: list[str] = []
    from gpudoctor.engine.prefix import parse_prefix

    lines = [parse_prefix(x).body for x in lines]
    for i in range(len(lines) - 1, -1, -1):
        m = _PY_FRAME.search(lines[i])
        python_frame = m is not None  # (not `m.re is _PY_FRAME`: a lazy regex's match names the compiled one)
        m = m or _CPP_FRAME.search(lines[i])
        if m is None:
            continue
        fn = m.group(1).rsplit("::", 1)[-1]
        code = lines[i + 1].strip(" │|") if python_frame and i + 1 < len(lines) else ""
        if code and (_PY_FRAME.search(code) or _CPP_FRAME.search(code)):
            code = ""
        if _WRAPPER_FN.match(fn) or (_NOISE_FN.match(fn) and not code):
            continue  # a wrapper's frame and its source line say nothing of the failure
        picked.append(" ".join(x for x in ("" if _NOISE_FN.match(fn) else fn, code[:160]) if x))
        if len(picked) == FRAMES_KEPT:
            break
    return "; ".join(picked)


EXCEPTION_HEAD = _lazy(r"(?:^|\s)[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\s*:")
# a line that starts a record of its own rather than carrying on the message above it
_NEW_RECORD = _lazy(r"^\s*(?:$|\[|\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|[\w.-]+:\d+:\d+ \[|File |Traceback|frame #|#\d|"
                         r"During handling|The above exception|Exception raised from|[A-Z][\w.]*(?:Error|Exception|Warning)\b|[A-Z]+\b:|"
                         r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\b|\w+\.py:\d+|\S+ = |[-=*#]{4,}|\x1b|[\w ]*:?\s*\d+%\||"
                         r"(?:python\d?|torchrun|deepspeed|accelerate|srun|mpirun)\s)")
CONTINUATION_LINES = 2  # lines of a wrapped exception message read with its first line


def _with_continuation(text: str, end: int, line: str) -> str:
    """An exception line with the lines that carry on its message (a wrapped message, "got error: Socket Timeout"
    on the next line): the words that tell one cause from another often sit there."""
    if not EXCEPTION_HEAD.search(line):
        return line
    from gpudoctor.engine.prefix import parse_prefix

    head = line[: len(line) - len(parse_prefix(line).body)]
    parts = [line]
    for _ in range(CONTINUATION_LINES):
        if end >= len(text):
            break
        nxt_end = text.find("\n", end + 1)
        nxt_end = len(text) if nxt_end < 0 else nxt_end
        nxt = text[end + 1: nxt_end].rstrip("\r")
        if head and not nxt.startswith(head):
            break
        body = nxt[len(head):]
        if len(body) > MAX_QUERY_CHARS or _NEW_RECORD.match(body) or _FRAME_LINE.match(body):
            break
        parts.append(body.strip())
        end = nxt_end
    return " ".join(parts)


def _exception_line(lines: list[str]) -> int | None:
    from gpudoctor.engine.tracebacks import parse_tracebacks

    for tb in parse_tracebacks(lines)[:1]:
        name = tb.exc_type.rsplit(".", 1)[-1]
        if not name:
            return None
        for i in range(min(tb.end, len(lines)) - 1, tb.start - 1, -1):
            if name + ":" in lines[i] or lines[i].strip() == tb.exc_type:
                return i
    return None
