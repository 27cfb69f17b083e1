"""Read structured messages in log lines: watchdog timeouts, tracebacks, torchrun failure summaries, NCCL env/net."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor.engine.lines import LinePrefix, iso_to_epoch, parse_prefix

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "Watchdog",
    "parse_watchdog",
    "Frame",
    "RaisedException",
    "TracebackInfo",
    "parse_traceback",
    "parse_tracebacks",
    "is_user_path",
    "RootCause",
    "parse_root_cause",
    "parse_nccl_env",
    "NetInterface",
    "NcclNet",
    "parse_nccl_net",
    "is_virtual_or_loopback",
]

# Python prints at most this many lines of an exception message in practice; a
# cap keeps a missing terminator from swallowing the rest of a window.
_MAX_MESSAGE_LINES = 60
_MAX_MESSAGE_CHARS = 16_384
# RecursionError tracebacks are folded by "[Previous line repeated N more times]", so real
# ones stay far below this; it bounds the scan when a window holds many cut-off headers.
_MAX_TRACEBACK_LINES = 5_000


class _lazy:  # noqa: N801 - stands in for re.compile
    """A regex compiled on first use: the CLI imports this module on every run, and
    compiling all of these up front costs more start-up time than most runs use them."""

    __slots__ = ("pattern", "flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0):
        self.pattern, self.flags = pattern, flags
        self._compiled: re.Pattern[str] | None = None

    def _get(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def match(self, text: str, pos: int = 0):
        return self._get().match(text, pos)

    def search(self, text: str, pos: int = 0):
        return self._get().search(text, pos)

    def findall(self, text: str) -> list:
        return self._get().findall(text)

    def finditer(self, text: str):
        return self._get().finditer(text)


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


# --- watchdog and collective timeouts ----------------------------------------


@dataclass(frozen=True, slots=True)
class Watchdog:
    """One collective-timeout report. Sequence numbers are as printed (-1: none yet)."""

    # nccl_timeout | nccl_async_error | nccl_work_status | nccl_watchdog_stuck | gloo_timeout | monitored_barrier
    kind: str
    backend: str  # nccl | gloo
    rank: int | None = None  # the reporting rank ([Rank 3], [PG 1 Rank 3])
    seq: int | None = None
    op_type: str | None = None  # ALLREDUCE, _ALLGATHER_BASE, COALESCED ...; gloo: recv / send
    numel_in: int | None = None  # None also when torch printed 2**64-1 for "unknown"
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    last_started: int | None = None
    pg_id: int | None = None
    pg_name: str | None = None  # default_pg, or a user-given process-group name
    missing_ranks: tuple[int, ...] = ()  # ranks named by monitoredBarrier as not arriving


_WD_TRIGGERS = (
    "WorkNCCL",
    "Watchdog caught collective operation",
    "NCCL work",
    "work sequence id",
    "watchdog got stuck",
    "Heartbeat monitor timed out",
    "Timed out waiting",
    "monitoredBarrier",
)
_RANK_TAG = _lazy(
    r"\[(?:PG (?:ID )?(\d{1,9})(?: PG GUID \d{1,9})? ?(?:\(([^()\]]{0,200})\))? )?Rank (\d{1,7})\]"
)
_WORK_FIELD = _lazy(r"(\w{1,40})=([^,\s]{0,40})")
_RAN_FOR = _lazy(r"\) ran for (\d{1,15}) milliseconds")
_AT_WORK = _lazy(
    r"(?:Timeout at NCCL work|detected by watchdog at work|at work sequence id): ?(-?\d{1,15})"
)
_LAST = _lazy(r"last (enqueued|completed|started) (?:NCCL )?work: ?(-?\d{1,15})")
_STUCK = _lazy(r"watchdog got stuck for (\d{1,9}) seconds")
_GLOO_WAIT = _lazy(r"Timed out waiting (\d{1,12})\s?ms for (recv|send) operation to complete")
_BARRIER_MISS = _lazy(r"Ranks? ((?:\d{1,7}, ?){0,4096}\d{1,7}) failed to pass monitoredBarrier in (\d{1,12}) ms")
_BARRIER_TIMEOUT = _lazy(r"Rank (\d{1,7}) timed out in monitoredBarrier after (\d{1,12}) ms")
_DIGITS = _lazy(r"\d+")
_NUMEL_UNKNOWN = 2**64 - 1  # torch prints size_t(-1) when it does not know


def _numel(text: str | None) -> int | None:
    value = _int(text)
    return None if value is None or value >= _NUMEL_UNKNOWN else value


def parse_watchdog(body: str) -> Watchdog | None:
    """Read an NCCL watchdog / work-status line, a gloo transport timeout or a
    monitoredBarrier failure. Searches anywhere in `body`; never raises."""
    if not any(t in body for t in _WD_TRIGGERS):
        return None
    tag = _RANK_TAG.search(body)
    pg_id, pg_name, rank = (_int(tag.group(1)), tag.group(2), _int(tag.group(3))) if tag else (None, None, None)
    lasts = {k: int(v) for k, v in _LAST.findall(body[:8192])}
    at_work = _AT_WORK.search(body)
    common = {
        "rank": rank,
        "pg_id": pg_id,
        "pg_name": pg_name or None,
        "last_enqueued": lasts.get("enqueued"),
        "last_completed": lasts.get("completed"),
        "last_started": lasts.get("started"),
    }
    seq = int(at_work.group(1)) if at_work else None

    at = body.find("WorkNCCL(")
    window = body[at : at + 1200] if at != -1 else ""
    # "Timeout(ms)" is the one field with parentheses in its name
    inner = window[len("WorkNCCL(") :].replace("Timeout(ms)", "Timeout_ms", 1).split(")", 1)[0]
    fields = dict(_WORK_FIELD.findall(inner))
    ran = _RAN_FOR.search(window)
    # a C++ stack frame "WorkNCCL::WorkNCCL(std::string ...)" names the class but is no report
    if "OpType" in fields or "SeqNum" in fields or ran or "Watchdog caught collective operation" in body:
        # "Collective WorkNCCL(...) raised the following async exception: NCCL error ..." is a failure, not a timeout
        failed = "raised the following async exception" in window and ran is None
        return Watchdog(
            kind="nccl_async_error" if failed else "nccl_timeout",
            backend="nccl",
            seq=_int(fields.get("SeqNum")) if "SeqNum" in fields else seq,
            op_type=fields.get("OpType") or None,
            numel_in=_numel(fields.get("NumelIn")),
            numel_out=_numel(fields.get("NumelOut")),
            timeout_ms=_int(fields.get("Timeout_ms")),
            ran_ms=_int(ran.group(1)) if ran else None,
            **common,
        )
    if at_work or lasts:
        return Watchdog(kind="nccl_work_status", backend="nccl", seq=seq, **common)
    stuck = _STUCK.search(body)
    if stuck or "Heartbeat monitor timed out" in body:
        timeout = int(stuck.group(1)) * 1000 if stuck else None
        return Watchdog(kind="nccl_watchdog_stuck", backend="nccl", timeout_ms=timeout, **common)
    gloo = _GLOO_WAIT.search(body)
    if gloo:
        return Watchdog(
            kind="gloo_timeout", backend="gloo", op_type=gloo.group(2), timeout_ms=int(gloo.group(1)), **common
        )
    miss = _BARRIER_MISS.search(body) or _BARRIER_TIMEOUT.search(body)
    if miss:
        ranks = tuple(int(r) for r in _DIGITS.findall(miss.group(1)))
        return Watchdog(
            kind="monitored_barrier", backend="gloo", timeout_ms=int(miss.group(2)), missing_ranks=ranks, **common
        )
    return None


# --- Python tracebacks ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    file: str
    line: int
    function: str | None  # None for SyntaxError-style frames
    source: str | None  # the code line Python showed under the frame
    is_user: bool  # not site-packages, the stdlib, torch itself or a launcher shim


@dataclass(frozen=True, slots=True)
class RaisedException:
    exc_type: str  # "" when the window ended before the exception line
    message: str
    frames: tuple[Frame, ...]
    link: str | None  # how the previous exception led here: "cause" (raise from), "context" (during handling)


@dataclass(frozen=True, slots=True)
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
_TB_HEADER = _lazy(r"([ \t]*)(?:traceback\s*: )?Traceback \(most recent call last\):\s*$")
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


def _parse_one(parsed: Sequence[LinePrefix], h: int, sig: tuple, link: str | None) -> tuple[RaisedException, int]:
    base = _indent(parsed[h].body)
    frames: list[list] = []
    exc_type, message = "", ""
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
            i += 1
            continue
        if _TB_HEADER.match(body):
            break  # a new traceback started before this one printed its exception
        if _indent(body) > base:
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


# --- torchrun / torchelastic failure summary -------------------------------------


@dataclass(frozen=True, slots=True)
class RootCause:
    """One entry of torchelastic's ChildFailedError summary."""

    is_root: bool  # listed under "Root Cause (first observed failure)"
    index: int  # the [N] of the entry
    script: str | None  # what the "<script> FAILED" title names
    time: str | None  # as printed: the agent host's local time
    epoch_s: float | None  # that time read as UTC, like parse_prefix does
    host: str | None
    rank: int | None
    local_rank: int | None
    exitcode: int | None
    pid: int | None
    signal: str | None  # SIGABRT, SIGKILL ... when a signal ended the worker
    error_file: str | None  # None for <N/A>
    traceback_text: str  # the traceback (or old-style msg) field, de-indented
    traceback: TracebackInfo | None
    line: int  # index into the given lines of the "[N]:" header


_RC_TITLE = _lazy(r"\s*(\S.{0,4000}?) FAILED\s*$")
_RC_SECTION = _lazy(r"\s*(Failures|Other Failures|Root Cause(?: \(first observed failure\))?):\s*$")
_RC_ENTRY = _lazy(r"\[(\d{1,7})\]:\s*$")
_RC_FIELD = _lazy(r"  ?(time|host|rank|exitcode|error_file|traceback|msg)\s*: ?(.*)$")
_RC_RULE = _lazy(r"\s*(?:={8,}|-{8,}|\*{8,})\s*$")
_RC_RANK = _lazy(r"(-?\d{1,9}) \(local_rank: (-?\d{1,9})\)")
_RC_EXIT = _lazy(r"(-?\d{1,9}) \(pid: (\d{1,10})\)(?:\s*\((SIG\w{1,10})\))?")
_RC_SIGNAL = _lazy(r"Signal (\d{1,3}) \((SIG\w{1,10})\) received by PID")
# Linux numbering, for summaries printed before torch added the name
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
            9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}  # fmt: skip


def _finish_entry(entry: dict, tb_lines: list[str]) -> RootCause:
    text = "\n".join(tb_lines).strip("\n")
    tb = parse_traceback(text.splitlines()) if "Traceback (most recent call last)" in text else None
    rank = _RC_RANK.search(entry.get("rank", ""))
    exit_m = _RC_EXIT.search(entry.get("exitcode", ""))
    exitcode = _int(exit_m.group(1)) if exit_m else _int(entry.get("exitcode", "").strip() or None)
    sig_m = _RC_SIGNAL.search(text)
    signal = (exit_m.group(3) if exit_m else None) or (sig_m.group(2) if sig_m else None)
    if signal is None and exitcode is not None and exitcode < 0:
        signal = _SIGNALS.get(-exitcode)
    error_file = entry.get("error_file", "").strip()
    time = entry.get("time", "").strip() or None
    return RootCause(
        is_root=entry["is_root"],
        index=entry["index"],
        script=entry["script"],
        time=time,
        epoch_s=iso_to_epoch(time) if time else None,
        host=entry.get("host", "").strip() or None,
        rank=_int(rank.group(1)) if rank else _int(entry.get("rank", "").strip() or None),
        local_rank=_int(rank.group(2)) if rank else None,
        exitcode=exitcode,
        pid=_int(exit_m.group(2)) if exit_m else None,
        signal=signal,
        error_file=None if error_file in ("", "<N/A>") else error_file,
        traceback_text=text,
        traceback=tb,
        line=entry["line"],
    )


def parse_root_cause(lines: Iterable[str]) -> list[RootCause]:
    """Entries of every ChildFailedError summary in the window, in printed order."""
    found: list[RootCause] = []
    script: str | None = None
    is_root = False
    in_block = False
    entry: dict | None = None
    tb_lines: list[str] = []
    reading_tb = False
    outer: str | None = None  # the prefix (e.g. srun's "0: ") the summary's own lines carry

    def close() -> None:
        nonlocal entry, reading_tb, tb_lines
        if entry is not None:
            found.append(_finish_entry(entry, tb_lines))
        entry, reading_tb, tb_lines = None, False, []

    for idx, line in enumerate(lines):
        p = parse_prefix(line)
        body = p.body
        if _RC_RULE.match(body):
            close()
            continue
        section = _RC_SECTION.match(body)
        if section:
            close()
            in_block, is_root = True, section.group(1).startswith("Root Cause")
            continue
        title = _RC_TITLE.match(body)
        if title and not reading_tb:
            close()
            in_block, script = True, title.group(1).strip()
            continue
        if not in_block:
            continue
        head = _RC_ENTRY.match(body)
        if head:
            close()
            entry = {"is_root": is_root, "index": int(head.group(1)), "script": script, "line": idx}
            outer = line[: p.offset] if p.offset is not None else None
            continue
        if entry is None:
            if body.strip() not in ("", "<NO_OTHER_FAILURES>"):
                in_block = False
            continue
        field = _RC_FIELD.match(body) if not reading_tb else None
        if field:
            key, value = field.group(1), field.group(2)
            if key in ("traceback", "msg"):
                reading_tb, tb_lines = True, [value.strip().strip('"') if key == "msg" else value.rstrip()]
            else:
                entry[key] = value
            continue
        if reading_tb:
            # Cut only the summary's own prefix: the traceback text may itself start with
            # something that looks like a prefix (a timestamp in a message, say).
            text = line[len(outer) :].rstrip("\r\n") if outer is not None and line.startswith(outer) else body
            # torchelastic indents every traceback line after the first by two spaces
            tb_lines.append(text[2:] if text.startswith("  ") else text.rstrip())
            continue
        close()
        in_block = False
    close()
    return found


# --- NCCL / torch environment and network choices ----------------------------------

_ENV_NAME = (
    r"(?:NCCL_\w{1,64}|TORCH_NCCL_\w{1,64}|TORCH_DISTRIBUTED_\w{1,64}|TORCH_CPP_LOG_LEVEL|TORCH_SHOW_CPP_STACKTRACES"
    r"|TORCHELASTIC_\w{1,64}|GLOO_\w{1,64}|MASTER_ADDR|MASTER_PORT|WORLD_SIZE|RANK|LOCAL_RANK|LOCAL_WORLD_SIZE"
    r"|CUDA_VISIBLE_DEVICES|CUDA_LAUNCH_BLOCKING|CUDA_DEVICE_MAX_CONNECTIONS|OMP_NUM_THREADS)"
)
_ENV_SET_BY = _lazy(r"(?<![\w$])(" + _ENV_NAME + r") set (?:by environment )?to (\S{0,1024})")
_ENV_ASSIGN = _lazy(
    r"(?<![\w$.])(" + _ENV_NAME + r")=(\"[^\"\n]{0,1024}\"|'[^'\n]{0,1024}'|[^\s;'\"()\[\]{}]{0,1024})"
)
_ENV_PYTHON = _lazy(r"""\[\s*["'](""" + _ENV_NAME + r""")["']\s*\]\s*=\s*["']([^"'\n]{0,1024})["']""")
_ENV_DICT = _lazy(r"""["'](""" + _ENV_NAME + r""")["']\s*:\s*["']([^"'\n]{0,1024})["']""")
# torch's "ProcessGroupNCCL environments: ..., TORCH_NCCL_ASYNC_ERROR_HANDLING: 3, ..."
_ENV_COLON = _lazy(r"(?<![\w$'\"])(TORCH_\w{1,64}): ([^\s,]{1,256})")
_ENV_HINT = _lazy(r"NCCL_|TORCH_|GLOO_|MASTER_|RANK|WORLD_SIZE|CUDA_|OMP_NUM")


def parse_nccl_env(body: str) -> dict[str, str]:
    """Distributed-training environment settings a line reveals: NCCL's "set by environment"
    lines, shell `export X=v` / `X=v cmd` / `-x X=v`, Python os.environ assignments and dict
    dumps, and torch's "ProcessGroupNCCL environments" summary. Later mentions win."""
    if not _ENV_HINT.search(body):
        return {}
    env: dict[str, str] = {}
    for m in _ENV_COLON.finditer(body):
        env[m.group(1)] = m.group(2)
    for regex in (_ENV_DICT, _ENV_PYTHON):
        for m in regex.finditer(body):
            env[m.group(1)] = m.group(2)
    for m in _ENV_ASSIGN.finditer(body):
        value = m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        else:
            value = value.rstrip(",")  # "A=1, B=2" in prose; NCCL's own lists ("^docker0,lo") keep theirs
        env[m.group(1)] = value
    for m in _ENV_SET_BY.finditer(body):
        # NCCL ends some of these with a full stop ("... set by environment to 1.")
        env[m.group(1)] = m.group(2).rstrip(".")
    return env


@dataclass(frozen=True, slots=True)
class NetInterface:
    name: str  # eth0, docker0, mlx5_0
    address: str | None = None  # IPv4/IPv6 (with %scope); None for IB devices
    index: int | None = None  # the [N] NCCL printed
    port: int | None = None  # IB port
    link: str | None = None  # IB / RoCE


@dataclass(frozen=True, slots=True)
class NcclNet:
    role: str  # bootstrap (OOB socket), net (transport devices), selected ("Using network X")
    transport: str  # Socket, IB, or the plugin's name
    interfaces: tuple[NetInterface, ...] = ()
    oob: NetInterface | None = None  # the socket interface IB uses out of band

    @property
    def pairs(self) -> tuple[tuple[str, str | None], ...]:
        return tuple((i.name, i.address) for i in self.interfaces)


_NET_USING = _lazy(
    r"(?<![\w/])(Bootstrap|NET(?:/([\w-]{1,40}))?)\s?:\s?(?:Using\s+(.{0,16384})|(No device found))"
)
_NET_IB_OLD = _lazy(r"NET/IB\s?:\s?(\[\d{1,4}\]\s?\S{1,128}:\d{1,4}/\w{1,16}.{0,4096})")
_NET_SELECTED = _lazy(r"Using (?:internal )?[Nn]etwork (\S.{0,100}?)\s*$")
_IF_SOCKET = _lazy(r"(?:\[(\d{1,4})\]\s?)?([\w.@-]{1,64}):([0-9A-Fa-f:.]{2,64}(?:%[\w.@-]{1,64})?)<\d{1,3}>")
_IF_IB = _lazy(r"(?:\[(\d{1,4})\]\s?)?([\w.-]{1,64}):(\d{1,4})/(\w{1,16})")
_IF_SIDEBAND = _lazy(r"interface ([\w.@-]{1,64}) for sideband")


def _socket_ifaces(text: str) -> tuple[NetInterface, ...]:
    return tuple(NetInterface(m.group(2), m.group(3), _int(m.group(1))) for m in _IF_SOCKET.finditer(text))


def parse_nccl_net(body: str) -> NcclNet | None:
    """Which interfaces NCCL says it uses: `Bootstrap : Using ...`, `NET/Socket : Using ...`,
    `NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:...`, the pre-2.4 `NET : Using interface ...`
    wording, and `Using network X`."""
    if "Using" not in body and "NET" not in body:
        return None
    m = _NET_USING.search(body)
    if m:
        what, sub, rest, none = m.group(1), m.group(2), m.group(3) or "", m.group(4)
        role = "bootstrap" if what == "Bootstrap" else "net"
        transport = "Socket" if what == "Bootstrap" or sub is None else sub
        if none:
            return NcclNet(role, transport)
        if transport == "IB" or _IF_SIDEBAND.search(rest):
            main, _, oob_text = rest.partition("OOB")
            ib = tuple(NetInterface(i.group(2), None, _int(i.group(1)), _int(i.group(3)), i.group(4))
                       for i in _IF_IB.finditer(main))  # fmt: skip
            side = _IF_SIDEBAND.search(main)
            oob = _socket_ifaces(oob_text)
            oob_if = oob[0] if oob else (NetInterface(side.group(1)) if side else None)
            return NcclNet(role, "IB" if transport == "IB" else transport, ib, oob_if)
        return NcclNet(role, transport, _socket_ifaces(rest))
    old_ib = _NET_IB_OLD.search(body)
    if old_ib:
        ib = tuple(NetInterface(i.group(2), None, _int(i.group(1)), _int(i.group(3)), i.group(4))
                   for i in _IF_IB.finditer(old_ib.group(1)))  # fmt: skip
        return NcclNet("net", "IB", ib)
    selected = _NET_SELECTED.search(body)
    if selected:
        return NcclNet("selected", selected.group(1))
    return None


_VIRTUAL_PREFIXES = (
    "docker", "virbr", "veth", "br-", "cni", "flannel", "cali", "tun", "tap", "vxlan", "weave",
    "kube-", "cilium", "lxc", "lxdbr", "podman", "vmnet", "vboxnet", "vnet", "zt", "tailscale",
    "wg", "dummy", "genev", "ovs-", "nerdctl", "antrea", "nodelocaldns", "utun",
)  # fmt: skip
_LOOPBACK = _lazy(r"lo\d{0,3}$")


def is_virtual_or_loopback(ifname: str) -> bool:
    """Whether an interface is loopback or a container/VM/VPN virtual device, i.e. not
    something other nodes can reach. A plain `br0` is often the real uplink, so only
    docker's `br-<id>` bridges count."""
    name = ifname.strip().split(":", 1)[0].lower()
    return bool(_LOOPBACK.match(name)) or name.startswith(_VIRTUAL_PREFIXES)
