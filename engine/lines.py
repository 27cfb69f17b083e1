"""Strip the prefixes that launchers, loggers, NCCL and schedulers put before a log line, keeping what they say."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

__all__ = [
    "LinePrefix",
    "parse_prefix",
    "visible_text",
    "strip_ansi",
    "clean_for_display",
    "iso_to_epoch",
    "MAX_PREFIXES",
]


@dataclass(frozen=True)  # no slots: parse_prefix installs __dict__ in one step (see _make)
class LinePrefix:
    """What the prefixes of one log line said, and the text left after them.

    Guarantees (tested on arbitrary text): `body` is a suffix of `visible_text(line)`;
    `offset` is where `body` starts in the original line (`line[offset:offset+len(body)]
    == body`), or None when ANSI codes were cut out and the body is no longer a slice;
    parsing `body` again strips nothing more unless it starts with an srun label
    ("3: "), which is only read on the outside of a line.
    """

    body: str
    offset: int | None = None
    rank: int | None = None  # global rank: [rank3]:, Open MPI [1,3]<stderr>:, vLLM (Worker rank=3 ...)
    local_rank: int | None = None  # torchrun --tee/-r [default3]:
    role: str | None = None  # torchrun role name from [default3]: / [trainer3]:
    task: int | None = None  # SLURM srun --label task id ("3: ")
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    device: int | None = None  # NCCL's [N]: the CUDA device index, not a rank
    level: str | None = None  # TRACE DEBUG INFO WARN ERROR FATAL
    timestamp: str | None = None  # the timestamp as printed
    epoch_s: float | None = None  # when the timestamp carries a full date (naive times read as UTC)
    day_s: float | None = None  # seconds since midnight, whenever a time of day was read
    source: str | None = None  # logger name or file:line that emitted the line
    stream: str | None = None  # stdout / stderr when the prefix says so
    kinds: tuple[str, ...] = ()  # which prefixes were stripped, outermost first


# --- text cleaning ---------------------------------------------------------

# CSI (colours, cursor moves), OSC (titles, hyperlinks), the two-byte escapes, and a
# stray ESC on its own: removing every ESC means removal cannot splice a new sequence.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])?")


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (and any ESC character left over)."""
    if "\x1b" not in text:
        return text
    return _ANSI.sub("", text)


def _ending_len(line: str) -> int:
    end = len(line)
    while end and line[end - 1] in "\r\n":
        end -= 1
    return len(line) - end


def visible_text(line: str) -> str:
    """The part of a line that prefixes are read from: no ANSI, no line ending, and
    only what follows the last carriage return (a progress bar redrawn with `\\r`
    leaves the real log record after its last `\\r`)."""
    text = strip_ansi(line).rstrip("\r\n")
    cr = text.rfind("\r")
    if cr != -1 and cr + 1 < len(text):
        text = text[cr + 1 :]
    return text


def _display_table() -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in range(0x20)}
    table[0x09] = "\t"  # tabs are harmless and common in logs
    table[0x0A] = "\\n"
    table[0x0D] = "\\r"
    table[0x7F] = "\\x7f"
    table.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})
    # bidirectional overrides can make a line read differently from what it says
    table.update({c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})
    return table


_DISPLAY = _display_table()


def clean_for_display(line: str) -> str:
    """Remove ANSI codes and the line ending; show other control characters as escapes."""
    return strip_ansi(line).rstrip("\r\n").translate(_DISPLAY)


# --- timestamps --------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}


def _days_from_civil(y: int, m: int, d: int) -> int:
    # Howard Hinnant's algorithm: days since 1970-01-01 without datetime's overhead
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _seconds_of_day(h: str, mi: str, s: str | None, frac: str | None) -> float | None:
    hh, mm, ss = int(h), int(mi), int(s) if s else 0
    if hh > 23 or mm > 59 or ss > 60:
        return None
    value = hh * 3600 + mm * 60 + ss
    return value + int(frac) / 10 ** len(frac) if frac else float(value)


def _tz_offset(tz: str | None) -> int:
    if not tz or tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)


def _epoch(y: str, mo: str | int, d: str, day: float | None, tz: str | None = None) -> float | None:
    year, month, dom = int(y), int(mo), int(d)
    if day is None or not (1 <= month <= 12 and 1 <= dom <= 31):
        return None
    return _days_from_civil(year, month, dom) * 86400 + day - _tz_offset(tz)


# --- the prefixes ------------------------------------------------------------

_LEVELS = {
    "TRACE": "TRACE", "DEBUG": "DEBUG", "D": "DEBUG",
    "INFO": "INFO", "I": "INFO", "NOTICE": "INFO",
    "WARN": "WARN", "WARNING": "WARN", "W": "WARN",
    "ERROR": "ERROR", "E": "ERROR", "ABORT": "ERROR",
    "FATAL": "FATAL", "F": "FATAL", "CRITICAL": "FATAL",
}  # fmt: skip
_LEVEL_WORD = r"(TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL)"
# ISO-ish date and time; the `_` separator is what torchelastic's failure summary prints
_ISO = (
    r"(\d{4})[-/](\d\d)[-/](\d\d)[T _](\d\d):(\d\d)(?::(\d\d)(?:[.,](\d{1,9}))?)?"
    r"(Z|[+-]\d\d:?\d\d(?![\d:]))?"
)
_ISO_ALONE = re.compile(_ISO, re.ASCII)
def iso_to_epoch(text: str) -> float | None:
    """Epoch seconds of an ISO-like timestamp at the start of `text` (naive times read as UTC)."""
    m = _ISO_ALONE.match(text)
    if m is None:
        return None
    y, mo, d, h, mi, s, frac, tz = m.groups()
    return _epoch(y, mo, d, _seconds_of_day(h, mi, s, frac), tz)


# c10 prints the month unpadded ("E626"), glog pads it ("I0501")
_GLOG_TIME = r"(\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"


# Handlers write what a prefix says into a plain dict that becomes the LinePrefix's
# instance dict (see _make): only fields that were read are stored, the rest fall back
# to the dataclass defaults, which live on the class.
_Acc = dict
_SCORE = "_ts_score"  # private key, removed before the dict becomes a LinePrefix


def _time(acc: _Acc, text: str, epoch: float | None, day: float | None, frac: str | None) -> None:
    # Several stacked timestamps (collector, launcher, process): keep the most informative one.
    score = (2 if epoch is not None else 1 if day is not None else 0) * 16 + (len(frac) if frac else 0)
    if score > acc.get(_SCORE, -1):
        acc[_SCORE], acc["timestamp"], acc["epoch_s"], acc["day_s"] = score, text, epoch, day


def _first(acc: _Acc, name: str, value: object) -> None:
    # outer prefixes win: they describe where the line came from before inner ones were added
    if value is not None and name not in acc:
        acc[name] = value


def _level(acc: _Acc, word: str | None) -> None:
    # the innermost level wins: it belongs to the message itself
    level = _LEVELS.get(word.upper()) if word else None
    if level is not None:
        acc["level"] = level


def _iso(acc: _Acc, m: re.Match[str], g: int) -> None:
    y, mo, d, h, mi, s, frac, tz = m.group(g, g + 1, g + 2, g + 3, g + 4, g + 5, g + 6, g + 7)
    day = _seconds_of_day(h, mi, s, frac)
    _time(acc, m.group(g - 1), _epoch(y, mo, d, day, tz), day, frac)


# Each handler reads one kind of prefix out of its match.
def _h_rank(m: re.Match[str], acc: _Acc) -> None:
    _first(acc, "rank", int(m.group(1)))


def _h_role(m: re.Match[str], acc: _Acc) -> None:
    _first(acc, "role", m.group(1))
    _first(acc, "local_rank", int(m.group(2)))


def _h_mpi(m: re.Match[str], acc: _Acc) -> None:
    _first(acc, "rank", int(m.group(2)))
    _first(acc, "stream", m.group(3))


def _h_slurm(m: re.Match[str], acc: _Acc) -> None:
    _first(acc, "task", int(m.group(1)))


def _h_iso(m: re.Match[str], acc: _Acc) -> None:
    _iso(acc, m, 2)


def _h_iso_cri(m: re.Match[str], acc: _Acc) -> None:
    _iso(acc, m, 2)
    _first(acc, "stream", m.group(10))


def _h_after_ts(m: re.Match[str], acc: _Acc) -> None:
    _level(acc, m.group(1))
    _first(acc, "source", m.group(2) or m.group(3))


def _h_glog(m: re.Match[str], acc: _Acc) -> None:
    _level(acc, m.group(1))
    mo, d, h, mi, s, frac, num, path, lineno = m.group(2, 3, 4, 5, 6, 7, 8, 9, 10)
    if h is not None:
        stamp = m.string[m.start(2) : m.end(7) if frac else m.end(6)]
        _time(acc, stamp, None, _seconds_of_day(h, mi, s, frac), frac)
    if num is not None:
        # torch's Python logs print the process id in glog's thread-id slot
        _first(acc, "pid" if path.endswith(".py") else "tid", int(num))
    _first(acc, "source", f"{path}:{lineno}")


def _h_nccl(m: re.Match[str], acc: _Acc) -> None:
    _first(acc, "host", m.group(1))
    _first(acc, "pid", int(m.group(2)))
    _first(acc, "tid", int(m.group(3)))
    _first(acc, "device", int(m.group(4)))
    _first(acc, "source", m.group(5))
    _level(acc, m.group(6))


def _h_pylog(m: re.Match[str], acc: _Acc) -> None:
    _level(acc, m.group(1))
    _first(acc, "source", m.group(2))


def _h_logger_level(m: re.Match[str], acc: _Acc) -> None:
    _first(acc, "source", m.group(1))
    _level(acc, m.group(2))


def _h_level_source(m: re.Match[str], acc: _Acc) -> None:
    _level(acc, m.group(1))
    _first(acc, "source", f"{m.group(2)}:{m.group(3)}")


def _h_level_bracket(m: re.Match[str], acc: _Acc) -> None:
    _level(acc, m.group(1))


def _h_level_ts_module(m: re.Match[str], acc: _Acc) -> None:
    _level(acc, m.group(1))
    _iso(acc, m, 3)
    _first(acc, "source", m.group(11))


def _h_hf(m: re.Match[str], acc: _Acc) -> None:
    _level(acc, m.group(1))
    _first(acc, "source", f"{m.group(2)}:{m.group(3)}")
    _iso(acc, m, 5)


def _h_llamafactory(m: re.Match[str], acc: _Acc) -> None:
    _level(acc, m.group(1))
    _iso(acc, m, 3)
    _first(acc, "source", f"{m.group(11)}:{m.group(12)}")


def _h_src_bracket(m: re.Match[str], acc: _Acc) -> None:
    _first(acc, "source", m.group(1))


def _h_syslog(m: re.Match[str], acc: _Acc) -> None:
    h, mi, s, frac, host, tag, pid = m.group(4, 5, 6, 7, 8, 9, 10)
    _time(acc, m.group(1), None, _seconds_of_day(h, mi, s, frac), frac)
    _first(acc, "host", host)
    _first(acc, "source", tag)
    _first(acc, "pid", int(pid) if pid else None)


def _h_syslog_after_iso(m: re.Match[str], acc: _Acc) -> None:
    _first(acc, "host", m.group(1))
    _first(acc, "source", m.group(2) or "kernel")
    _first(acc, "pid", int(m.group(3)) if m.group(3) else None)


def _h_dmesg_t(m: re.Match[str], acc: _Acc) -> None:
    mon, d, h, mi, s, y = m.group(2, 3, 4, 5, 6, 7)
    day = _seconds_of_day(h, mi, s, None)
    _time(acc, m.group(1), _epoch(y, _MONTHS[mon], d, day), day, None)


def _h_dmesg(m: re.Match[str], acc: _Acc) -> None:
    _time(acc, m.group(1), None, None, None)  # seconds since boot: kept as text only


def _h_vllm(m: re.Match[str], acc: _Acc) -> None:
    _level(acc, m.group(1))
    h, mi, s, frac = m.group(4, 5, 6, 7)
    _time(acc, f"{m.group(2)}-{m.group(3)} {h}:{mi}:{s}", None, _seconds_of_day(h, mi, s, frac), frac)
    _first(acc, "source", f"{m.group(8)}:{m.group(9)}")


_KV = re.compile(r"(\w+)=([^\s,()]+)", re.ASCII)


def _h_actor(m: re.Match[str], acc: _Acc) -> None:
    # Ray's "(RayTrainWorker pid=12, ip=10.0.0.1)" and vLLM's "(VllmWorker rank=0 pid=12)"
    _first(acc, "source", m.group(1))
    for key, value in _KV.findall(m.group(2)):
        if key == "pid" and value.isdigit():
            _first(acc, "pid", int(value))
        elif key == "rank" and value.isdigit():
            _first(acc, "rank", int(value))
        elif key == "ip":
            _first(acc, "host", value)


def _h_stream_name(m: re.Match[str], acc: _Acc) -> None:
    _first(acc, "source", m.group(1))
    _first(acc, "stream", m.group(2))


def _h_nothing(m: re.Match[str], acc: _Acc) -> None:
    pass


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    regex: _LazyRegex
    handle: Callable[[re.Match[str], _Acc], None]
    first_chars: str
    after: frozenset[str] = frozenset()  # only right after one of these kinds
    outer_only: bool = False  # only before any prefix a process prints itself (see _OUTER_KINDS)


class _LazyRegex:
    """Compiled on first use: most runs meet a handful of prefix kinds, and start-up time counts."""

    __slots__ = ("pattern", "_compiled")

    def __init__(self, pattern: str):
        self.pattern = pattern
        self._compiled: re.Pattern[str] | None = None

    def match(self, text: str, pos: int = 0):
        if self._compiled is None:
            # prefixes are ASCII; without the flag \d and \w would also accept other scripts
            self._compiled = re.compile(self.pattern, re.ASCII)
        return self._compiled.match(text, pos)


def _rx(pattern: str) -> _LazyRegex:
    return _LazyRegex(pattern)


_DIGITS = "0123456789"
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
_TS_KINDS = frozenset({"iso", "iso_bracket"})
# what a log collector or scheduler may put outside srun's label
_OUTER_KINDS = frozenset({"iso", "iso_bracket", "iso_cri", "indent", "syslog", "dmesg"})
_NCCL = (
    r"([A-Za-z0-9_][\w.-]{0,252}):(\d{1,10}):(\d{1,10}) \[(\d{1,4})\] "
    r"(?:([\w./-]{1,200}:\d{1,7}) )?(?:NCCL )?(INFO|WARN|TRACE|ABORT|ERROR|DEBUG)(?: |$)"
)

# Strong rules are stripped wherever they appear in the stack of prefixes.
_STRONG: tuple[_Rule, ...] = (
    _Rule("rank", _rx(r"\[rank(\d{1,7})\]: ?"), _h_rank, "["),
    # the lookahead rejects "[E1122 ..." before the lazy role/number split starts backtracking
    _Rule("tee", _rx(r"\[(?=[\w|-]{1,80}\]:)([A-Za-z_][\w-]{0,63}?)(\d{1,7})(?:\|\d{1,7})?\]:"), _h_role, "["),
    _Rule("mpi", _rx(r"\[(\d{1,7}),(\d{1,7})\]<(stdout|stderr|stddiag)>:"), _h_mpi, "["),
    # torchrun's log_line_prefix_template="[${rank}]:"; never the bare "[0]:" of a failure summary
    _Rule("rank", _rx(r"\[(\d{1,7})\]:(?=\S)"), _h_rank, "["),
    _Rule("iso_bracket", _rx(r"\[(" + _ISO + r")\](?:\s+|$)"), _h_iso, "["),
    _Rule(
        "glog",
        _rx(
            r"\[([IWEFD])(?:" + _GLOG_TIME + r"(?: (\d{1,10}))?)? ([^\s\]:]{1,300}):(\d{1,7})\] ?"
        ),
        _h_glog,
        "[",
    ),
    _Rule(
        "hf",
        _rx(r"\[" + _LEVEL_WORD + r"\|([^\]|:\s]{1,200}):(\d{1,7})\] (" + _ISO + r") >> ?"),
        _h_hf,
        "[",
    ),
    _Rule(
        "llamafactory",
        _rx(r"\[" + _LEVEL_WORD + r"\|(" + _ISO + r")\] ([\w.]{1,200}):(\d{1,7}) >> ?"),
        _h_llamafactory,
        "[",
    ),
    _Rule(
        "level_ts_module",
        _rx(r"\[" + _LEVEL_WORD + r"\] (" + _ISO + r") ([\w.]{1,200}): "),
        _h_level_ts_module,
        "[",
    ),
    _Rule("level", _rx(r"\[" + _LEVEL_WORD + r"\](?: +|$)"), _h_level_bracket, "["),
    # DeepSpeed's "[launch.py:145:main] "
    _Rule("src", _rx(r"\[([\w.-]{1,200}\.py:\d{1,7}:[\w<>.]{1,200})\] "), _h_src_bracket, "["),
    _Rule(
        "dmesg",
        _rx(
            r"(\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
            r" {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]) ?"
        ),
        _h_dmesg_t,
        "[",
    ),
    _Rule("dmesg", _rx(r"(\[ {0,12}\d{1,12}\.\d{1,9}\]) ?"), _h_dmesg, "["),
    _Rule(
        "iso_cri",
        _rx("(" + _ISO + r") (stdout|stderr) [FP] "),
        _h_iso_cri,
        _DIGITS,
    ),
    _Rule("iso", _rx("(" + _ISO + r")(?:\s*[-|]\s+|:?\s+|$)"), _h_iso, _DIGITS),
    # srun --label is the outermost layer (only a collector's timestamp goes before it); inside
    # a process's own prefix, "[default0]:100: loss 2.3" is the program printing a step number
    _Rule("slurm", _rx(r"[ \t]{0,8}(\d{1,7}): "), _h_slurm, _DIGITS + " \t", outer_only=True),
    _Rule(
        "glog",
        _rx(r"([IWEFD])" + _GLOG_TIME + r"(?: +(\d{1,10}))? ([^\s\]:]{1,300}):(\d{1,7})\] ?"),
        _h_glog,
        "IWEFD",
    ),
    _Rule("pylog", _rx(_LEVEL_WORD + r":([\w.<>-]{1,200}):"), _h_pylog, "TDINWECF"),
    _Rule(
        "vllm",
        _rx(
            _LEVEL_WORD + r" (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))? \[?([\w./-]{1,200}):(\d{1,7})\] "
        ),
        _h_vllm,
        "TDINWECF",
    ),
    _Rule(
        "syslog",
        _rx(
            r"((Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)"
            r" ([\w.-]{1,253}) ([\w./-]{1,100})(?:\[(\d{1,10})\])?: "
        ),
        _h_syslog,
        "JFMASOND",
    ),
    # torch 2.1-2.3: "[2023-10-20 10:24:10,690] torch.distributed.run: [WARNING] "
    _Rule("logger_level", _rx(r"([\w.]{1,200}): \[" + _LEVEL_WORD + r"\] "), _h_logger_level, _LETTERS),
    _Rule("nccl", _rx(_NCCL), _h_nccl, _LETTERS + _DIGITS),
    _Rule(
        "actor",
        _rx(r"\(([A-Za-z_][\w.-]{0,100}) ((?:\w{1,20}=[^\s,()]{1,100},? ?){1,6})\) ?"),
        _h_actor,
        "(",
    ),
    # Only straight after a timestamp: "- INFO - name - ", "| INFO     | mod:fn:12 - ", " INFO "
    _Rule(
        "level",
        _rx(
            r"\[?" + _LEVEL_WORD + r"\]?"
            r"(?: - ([\w.<>]{1,200}) - |\s*\|\s*(?:([\w.<>]{1,200}:[\w<>]{1,200}:\d{1,7}) - )?"
            r"|:? +|:$|$)"
        ),
        _h_after_ts,
        "[" + _LETTERS,
        _TS_KINDS,
    ),
    # TensorFlow / absl after a timestamp: "2022-07-29 21:30:06.898118: I tensorflow/...cc:384] "
    _Rule(
        "glog",
        _rx(r"([IWEF]) ([^\s\]:]{1,300}):(\d{1,7})\] "),
        _h_level_source,
        "IWEF",
        _TS_KINDS,
    ),
    _Rule(
        "syslog",
        _rx(r"([\w.-]{1,253}) (?:kernel|([\w./-]{1,100})\[(\d{1,10})\]): "),
        _h_syslog_after_iso,
        _LETTERS + _DIGITS,
        _TS_KINDS,
    ),
)

# Weak rules are stripped only when a strong prefix follows them, because on
# their own they could just as well be the start of the message.
_WEAK: tuple[_Rule, ...] = (
    _Rule("indent", _rx(r"[ \t]{1,64}"), _h_nothing, " \t"),
    # torchx / NeMo-Run "role/0 " replica prefix
    _Rule("replica", _rx(r"[A-Za-z_][\w-]{0,100}/\d{1,7} "), _h_nothing, _LETTERS),
    _Rule("stream_name", _rx(r"([\w.-]{1,200}) \[(stdout|stderr)\] "), _h_stream_name, _LETTERS + _DIGITS),
)


class _Table:
    """First character -> the rules a line can start with there, in priority order.

    Rules are tried one by one, each regex compiled once per process on first use. One big
    alternation per character matched a little faster per line, but compiling those
    alternations cost ~100 ms at start-up, and only a handful of lines ever reach this code.
    """

    def __init__(self, rules: tuple[_Rule, ...]):
        assert all(not r.after or r.after == _TS_KINDS for r in rules)  # one context kind is all we need
        self._by_char: dict[str, list[_Rule]] = {}
        for rule in rules:
            for ch in rule.first_chars:
                self._by_char.setdefault(ch, []).append(rule)

    def get(self, ch: str) -> list[_Rule] | None:
        return self._by_char.get(ch)


def _index(rules: tuple[_Rule, ...]) -> _Table:
    return _Table(rules)


_STRONG_BY_CHAR = _index(_STRONG)
_WEAK_BY_CHAR = _index(_WEAK)


def _match(table: _Table, text: str, pos: int, last: str | None, outer: bool = True):
    rules = table.get(text[pos])
    if not rules:
        return None
    after_ts = last in _TS_KINDS
    for rule in rules:
        if rule.after and not after_ts:
            continue
        m = rule.regex.match(text, pos)
        if m is None:
            continue
        # the first rule that matches decides, as the alternation did
        if m.end() == pos:
            return None
        if rule.outer_only and not outer:
            return None  # no other rule matches "12: " either, so nothing is lost by stopping
        return rule, m
    return None


_new = object.__new__
_set = object.__setattr__


def _make(values: dict) -> LinePrefix:
    # A frozen dataclass __init__ costs one object.__setattr__ per field (17 here); installing
    # the instance dict in one step is several times cheaper and the result is just as frozen.
    # Fields missing from `values` read as their defaults, which dataclass keeps on the class.
    obj = _new(LinePrefix)
    _set(obj, "__dict__", values)
    return obj


# Real stacks are at most ~6 deep; the cap keeps a pathological line ("[rank0]:" repeated
# for megabytes) from costing one loop turn per repetition.
MAX_PREFIXES = 16


def parse_prefix(line: str) -> LinePrefix:
    """Strip the stacked prefixes from one log line and say what they held. Never raises."""
    text = visible_text(line)
    n = len(text)
    pos = 0
    acc: _Acc = {}
    kinds: list[str] = []
    last: str | None = None
    outer = True  # no process-level prefix read yet
    while pos < n and len(kinds) < MAX_PREFIXES:
        hit = _match(_STRONG_BY_CHAR, text, pos, last, outer)
        if hit is None:
            weak = _match(_WEAK_BY_CHAR, text, pos, last, outer)
            if weak is None or weak[1].end() >= n:
                break
            hit = _match(_STRONG_BY_CHAR, text, weak[1].end(), last, outer and weak[0].kind in _OUTER_KINDS)
            if hit is None:
                break
            weak[0].handle(weak[1], acc)
            kinds.append(weak[0].kind)
            outer = outer and weak[0].kind in _OUTER_KINDS
        rule, m = hit
        rule.handle(m, acc)
        kinds.append(rule.kind)
        last = rule.kind
        outer = outer and last in _OUTER_KINDS
        pos = m.end()
    body = text[pos:] if pos else text
    # text is a suffix of the line minus its ending unless ANSI codes were cut out of it
    offset = len(line) - _ending_len(line) - len(body) if len(text) <= len(line) and "\x1b" not in line else None
    if not kinds:
        return _make({"body": body, "offset": offset})
    acc.pop(_SCORE, None)
    acc["body"], acc["offset"], acc["kinds"] = body, offset, tuple(kinds)
    return _make(acc)


