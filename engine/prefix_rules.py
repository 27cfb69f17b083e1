"""The prefixes launchers, loggers, NCCL and schedulers put before a log line: one rule each, and what it reads."""
from __future__ import annotations

import re

from gpudoctor.engine.lazyregex import LazyRegex
from gpudoctor.engine.timefmt import GLOG_TIME, ISO, MONTHS, epoch, seconds_of_day
from gpudoctor.kb.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs every run start-up time
    from typing import Callable

_LEVELS = {
    "TRACE": "TRACE", "DEBUG": "DEBUG", "D": "DEBUG",
    "INFO": "INFO", "I": "INFO", "NOTICE": "INFO",
    "WARN": "WARN", "WARNING": "WARN", "W": "WARN",
    "ERROR": "ERROR", "E": "ERROR", "ABORT": "ERROR",
    "FATAL": "FATAL", "F": "FATAL", "CRITICAL": "FATAL",
}  # fmt: skip
_LEVEL_WORD = r"(TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL)"
# the columns a launcher or log collector puts before every line: read here as a line's prefix, and cut from a
# whole kept text by engine/columns.py (one pattern each, so that the two never disagree)
SAGEMAKER = r"\[\d{1,7},mpirank:(\d{1,7}),([\w.-]{1,100})\]<(stdout|stderr|stddiag)>:"  # its rank, then the host
POD = r"\[pod/([\w.-]{1,253})/([\w.-]{1,63})\] ?"  # kubectl logs --prefix
SLURM = r"[ \t]{0,8}(\d{1,7}): "  # srun --label
QUOTE = r"(?:> ?){1,8}"  # a log quoted in a reply (Markdown, e-mail)
# pdsh (the deepspeed runner's multi-node launch): "worker-1: ", "10.0.0.2: "; a name with a digit and a dot or dash,
# so that "step1: " or "RuntimeError: " is not one
PDSH = r"((?=[\w.-]*\d)(?=[\w.-]*[.-])[A-Za-z0-9][\w.-]{0,252}): "
COMPOSE = r"([A-Za-z][\w.-]{0,100}[-_]\d{1,4}) {1,40}\| "  # "trainer-1  | " (v2), "trainer_1  | " (v1), padded
RAY = r"\(([A-Za-z_][\w.-]{0,100}) ((?:\w{1,20}=[^\s,()]{1,100},? ?){1,6})\) ?"  # Ray's and vLLM's worker

# Handlers write what a prefix says into a plain dict that becomes the LinePrefix's
# instance dict (see _make): only fields that were read are stored, the rest fall back
# to the record defaults, which live on the class.
Acc = dict
SCORE = "_ts_score"  # private key, removed before the dict becomes a LinePrefix


def _time(acc: Acc, text: str, epoch_s: float | None, day: float | None, frac: str | None) -> None:
    # Several stacked timestamps (collector, launcher, process): keep the most informative one.
    score = (2 if epoch_s is not None else 1 if day is not None else 0) * 16 + (len(frac) if frac else 0)
    if score > acc.get(SCORE, -1):
        acc[SCORE], acc["timestamp"], acc["epoch_s"], acc["day_s"] = score, text, epoch_s, day


def _first(acc: Acc, name: str, value: object) -> None:
    # outer prefixes win: they describe where the line came from before inner ones were added
    if value is not None and name not in acc:
        acc[name] = value


def _level(acc: Acc, word: str | None) -> None:
    # the innermost level wins: it belongs to the message itself
    level = _LEVELS.get(word.upper()) if word else None
    if level is not None:
        acc["level"] = level


def _iso(acc: Acc, m: re.Match[str], g: int) -> None:
    y, mo, d, h, mi, s, frac, tz = m.group(g, g + 1, g + 2, g + 3, g + 4, g + 5, g + 6, g + 7)
    day = seconds_of_day(h, mi, s, frac)
    _time(acc, m.group(g - 1), epoch(y, mo, d, day, tz), day, frac)


# Each handler reads one kind of prefix out of its match.
def _h_rank(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "rank", int(m.group(1)))


def _h_role(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "role", m.group(1))
    _first(acc, "local_rank", int(m.group(2)))


def _h_mpi(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "rank", int(m.group(2)))
    _first(acc, "stream", m.group(3))


def _h_sagemaker(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "rank", int(m.group(1)))
    _first(acc, "host", m.group(2))
    _first(acc, "stream", m.group(3))


def _h_pod(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "host", m.group(1))
    _first(acc, "source", m.group(2))


def _h_slurm(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "task", int(m.group(1)))


def _h_iso(m: re.Match[str], acc: Acc) -> None:
    _iso(acc, m, 2)


def _h_iso_cri(m: re.Match[str], acc: Acc) -> None:
    _iso(acc, m, 2)
    _first(acc, "stream", m.group(10))


def _h_after_ts(m: re.Match[str], acc: Acc) -> None:
    _level(acc, m.group(1))
    _first(acc, "source", m.group(2) or m.group(3))


def _h_glog(m: re.Match[str], acc: Acc) -> None:
    _level(acc, m.group(1))
    mo, d, h, mi, s, frac, num, path, lineno = m.group(2, 3, 4, 5, 6, 7, 8, 9, 10)
    if h is not None:
        stamp = m.string[m.start(2) : m.end(7) if frac else m.end(6)]
        _time(acc, stamp, None, seconds_of_day(h, mi, s, frac), frac)
    if num is not None:
        # torch's Python logs print the process id in glog's thread-id slot
        _first(acc, "pid" if path.endswith(".py") else "tid", int(num))
    _first(acc, "source", f"{path}:{lineno}")


def _h_nccl(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "host", m.group(1))
    _first(acc, "pid", int(m.group(2)))
    _first(acc, "tid", int(m.group(3)))
    _first(acc, "device", int(m.group(4)))
    _first(acc, "source", m.group(5))
    _level(acc, m.group(6))


def _h_pylog(m: re.Match[str], acc: Acc) -> None:
    _level(acc, m.group(1))
    _first(acc, "source", m.group(2))


def _h_logger_level(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "source", m.group(1))
    _level(acc, m.group(2))


def _h_level_source(m: re.Match[str], acc: Acc) -> None:
    _level(acc, m.group(1))
    _first(acc, "source", f"{m.group(2)}:{m.group(3)}")


def _h_level_bracket(m: re.Match[str], acc: Acc) -> None:
    _level(acc, m.group(1))


def _h_level_ts_module(m: re.Match[str], acc: Acc) -> None:
    _level(acc, m.group(1))
    _iso(acc, m, 3)
    _first(acc, "source", m.group(11))


def _h_hf(m: re.Match[str], acc: Acc) -> None:
    _level(acc, m.group(1))
    _first(acc, "source", f"{m.group(2)}:{m.group(3)}")
    _iso(acc, m, 5)


def _h_llamafactory(m: re.Match[str], acc: Acc) -> None:
    _level(acc, m.group(1))
    _iso(acc, m, 3)
    _first(acc, "source", f"{m.group(11)}:{m.group(12)}")


def _h_src_bracket(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "source", m.group(1))


def _h_syslog(m: re.Match[str], acc: Acc) -> None:
    h, mi, s, frac, host, tag, pid = m.group(4, 5, 6, 7, 8, 9, 10)
    _time(acc, m.group(1), None, seconds_of_day(h, mi, s, frac), frac)
    _first(acc, "host", host)
    _first(acc, "source", tag)
    _first(acc, "pid", int(pid) if pid else None)


def _h_syslog_after_iso(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "host", m.group(1))
    _first(acc, "source", m.group(2) or "kernel")
    _first(acc, "pid", int(m.group(3)) if m.group(3) else None)


def _h_dmesg_t(m: re.Match[str], acc: Acc) -> None:
    mon, d, h, mi, s, y = m.group(2, 3, 4, 5, 6, 7)
    day = seconds_of_day(h, mi, s, None)
    _time(acc, m.group(1), epoch(y, MONTHS[mon], d, day), day, None)


def _h_month_time(m: re.Match[str], acc: Acc) -> None:
    # moreutils `ts` by default: "Nov 29 12:00:01 " (no year, host or program, unlike syslog)
    h, mi, s, frac = m.group(4, 5, 6, 7)
    _time(acc, m.group(1), None, seconds_of_day(h, mi, s, frac), frac)


def _h_clock(m: re.Match[str], acc: Acc) -> None:
    # a bare time of day, "12:00:01 " or "[12:00:01.123] " (ts "%H:%M:%S", tqdm-free loggers, shell wrappers)
    h, mi, s, frac = m.group(2, 3, 4, 5)
    _time(acc, m.group(1), None, seconds_of_day(h, mi, s, frac), frac)


def _h_pid_only(m: re.Match[str], acc: Acc) -> None:
    # Ray's prefix for a plain remote task's output: "(pid=1234) " or "(pid=1234, ip=10.0.0.1) "
    _first(acc, "pid", int(m.group(1)))
    _first(acc, "host", m.group(2))


def _h_dmesg(m: re.Match[str], acc: Acc) -> None:
    _time(acc, m.group(1), None, None, None)  # seconds since boot: kept as text only


def _h_vllm(m: re.Match[str], acc: Acc) -> None:
    _level(acc, m.group(1))
    h, mi, s, frac = m.group(4, 5, 6, 7)
    _time(acc, f"{m.group(2)}-{m.group(3)} {h}:{mi}:{s}", None, seconds_of_day(h, mi, s, frac), frac)
    _first(acc, "source", f"{m.group(8)}:{m.group(9)}")


_KV = LazyRegex(r"(\w+)=([^\s,()]+)", re.ASCII)


def _h_actor(m: re.Match[str], acc: Acc) -> None:
    # Ray's "(RayTrainWorker pid=12, ip=10.0.0.1)" and vLLM's "(VllmWorker rank=0 pid=12)"
    _first(acc, "source", m.group(1))
    for key, value in _KV.findall(m.group(2)):
        if key == "pid" and value.isdigit():
            _first(acc, "pid", int(value))
        elif key == "rank" and value.isdigit():
            _first(acc, "rank", int(value))
        elif key == "ip":
            _first(acc, "host", value)


def _h_stream_name(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "source", m.group(1))
    _first(acc, "stream", m.group(2))


def _h_pdsh(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "host", m.group(1))


def _h_compose(m: re.Match[str], acc: Acc) -> None:
    _first(acc, "source", m.group(1))


def _h_nothing(m: re.Match[str], acc: Acc) -> None:
    pass


@record(frozen=True)
class Rule:
    """One kind of prefix: its regex, what it reads, and where it may stand."""

    kind: str
    regex: LazyRegex
    handle: Callable[[re.Match[str], Acc], None]
    first_chars: str
    after: frozenset[str] = frozenset()  # only right after one of these kinds
    outer_only: bool = False  # only before any prefix a process prints itself (see OUTER_KINDS)


def _rx(pattern: str) -> LazyRegex:
    # prefixes are ASCII; without the flag \d and \w would also accept other scripts
    return LazyRegex(pattern, re.ASCII)


_DIGITS = "0123456789"
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
TS_KINDS = frozenset({"iso", "iso_bracket", "month_time", "clock"})
# what a log collector or scheduler may put outside srun's label
OUTER_KINDS = frozenset({"iso", "iso_bracket", "iso_cri", "indent", "syslog", "dmesg", "month_time", "clock"})
_CLOCK = r"((\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?)"
_NCCL = (
    r"([A-Za-z0-9_][\w.-]{0,252}):(\d{1,10}):(\d{1,10}) \[(\d{1,4})\] "
    r"(?:([\w./-]{1,200}:\d{1,7}) )?(?:NCCL )?(INFO|WARN|TRACE|ABORT|ERROR|DEBUG)(?: |$)"
)

# Strong rules are stripped wherever they appear in the stack of prefixes.
STRONG: tuple[Rule, ...] = (
    Rule("rank", _rx(r"\[rank(\d{1,7})\]: ?"), _h_rank, "["),
    # the lookahead rejects "[E1122 ..." before the lazy role/number split starts backtracking
    Rule("tee", _rx(r"\[(?=[\w|-]{1,80}\]:)([A-Za-z_][\w-]{0,63}?)(\d{1,7})(?:\|\d{1,7})?\]:"), _h_role, "["),
    Rule("mpi", _rx(r"\[(\d{1,7}),(\d{1,7})\]<(stdout|stderr|stddiag)>:"), _h_mpi, "["),
    Rule("mpi", _rx(SAGEMAKER), _h_sagemaker, "["),
    Rule("pod", _rx(POD), _h_pod, "[", outer_only=True),
    # torchrun's log_line_prefix_template="[${rank}]:"; never the bare "[0]:" of a failure summary
    Rule("rank", _rx(r"\[(\d{1,7})\]:(?=\S)"), _h_rank, "["),
    Rule("iso_bracket", _rx(r"\[(" + ISO + r")\](?:\s+|$)"), _h_iso, "["),
    Rule(
        "glog",
        _rx(
            r"\[([IWEFD])(?:" + GLOG_TIME + r"(?: (\d{1,10}))?)? ([^\s\]:]{1,300}):(\d{1,7})\] ?"
        ),
        _h_glog,
        "[",
    ),
    Rule(
        "hf",
        _rx(r"\[" + _LEVEL_WORD + r"\|([^\]|:\s]{1,200}):(\d{1,7})\] (" + ISO + r") >> ?"),
        _h_hf,
        "[",
    ),
    Rule(
        "llamafactory",
        _rx(r"\[" + _LEVEL_WORD + r"\|(" + ISO + r")\] ([\w.]{1,200}):(\d{1,7}) >> ?"),
        _h_llamafactory,
        "[",
    ),
    Rule(
        "level_ts_module",
        _rx(r"\[" + _LEVEL_WORD + r"\] (" + ISO + r") ([\w.]{1,200}): "),
        _h_level_ts_module,
        "[",
    ),
    Rule("level", _rx(r"\[" + _LEVEL_WORD + r"\](?: +|$)"), _h_level_bracket, "["),
    # DeepSpeed's "[launch.py:145:main] "
    Rule("src", _rx(r"\[([\w.-]{1,200}\.py:\d{1,7}:[\w<>.]{1,200})\] "), _h_src_bracket, "["),
    Rule(
        "dmesg",
        _rx(
            r"(\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
            r" {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]) ?"
        ),
        _h_dmesg_t,
        "[",
    ),
    Rule("dmesg", _rx(r"(\[ {0,12}\d{1,12}\.\d{1,9}\]) ?"), _h_dmesg, "["),
    Rule(
        "iso_cri",
        _rx("(" + ISO + r") (stdout|stderr) [FP] "),
        _h_iso_cri,
        _DIGITS,
    ),
    # one blank after the time, not all: what follows may be a traceback's indentation (kubectl logs --timestamps)
    Rule("iso", _rx("(" + ISO + r")(?:\s*[-|]\s+|:?\s|$)"), _h_iso, _DIGITS),
    # srun --label is the outermost layer (only a collector's timestamp goes before it); inside
    # a process's own prefix, "[default0]:100: loss 2.3" is the program printing a step number
    Rule("slurm", _rx(SLURM), _h_slurm, _DIGITS + " \t", outer_only=True),
    Rule(
        "glog",
        _rx(r"([IWEFD])" + GLOG_TIME + r"(?: +(\d{1,10}))? ([^\s\]:]{1,300}):(\d{1,7})\] ?"),
        _h_glog,
        "IWEFD",
    ),
    Rule("pylog", _rx(_LEVEL_WORD + r":([\w.<>-]{1,200}):"), _h_pylog, "TDINWECF"),
    Rule(
        "vllm",
        _rx(
            _LEVEL_WORD + r" (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))? \[?([\w./-]{1,200}):(\d{1,7})\] "
        ),
        _h_vllm,
        "TDINWECF",
    ),
    Rule(
        "syslog",
        _rx(
            r"((Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)"
            r" ([\w.-]{1,253}) ([\w./-]{1,100})(?:\[(\d{1,10})\])?: "
        ),
        _h_syslog,
        "JFMASOND",
    ),
    # moreutils `ts` ("python train.py 2>&1 | ts"): a month, a day and a time, then the line as it was
    Rule(
        "month_time",
        _rx(r"((Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)"
            r"(?= )(?! [\w.-]{1,253} [\w./-]{1,100}(?:\[\d{1,10}\])?: ) "),
        _h_month_time,
        "JFMASOND",
    ),
    # a bare time of day before the line, plain or bracketed
    Rule("clock", _rx(_CLOCK + r"(?: [-|] | )(?=\S)"), _h_clock, _DIGITS),
    Rule("clock", _rx(r"\[" + _CLOCK + r"\] ?(?=\S)"), _h_clock, "["),
    Rule("pid_only", _rx(r"\(pid=(\d{1,10})(?:, ip=([\w.:-]{1,100}))?\) ?(?=\S)"), _h_pid_only, "("),
    # torch 2.1-2.3: "[2023-10-20 10:24:10,690] torch.distributed.run: [WARNING] "
    Rule("logger_level", _rx(r"([\w.]{1,200}): \[" + _LEVEL_WORD + r"\] "), _h_logger_level, _LETTERS),
    Rule("nccl", _rx(_NCCL), _h_nccl, _LETTERS + _DIGITS),
    Rule("quote", _rx(QUOTE + r"(?=\S)"), _h_nothing, ">", outer_only=True),
    Rule("pdsh", _rx(PDSH + r"(?=\S)"), _h_pdsh, _LETTERS + _DIGITS, outer_only=True),
    Rule("compose", _rx(COMPOSE), _h_compose, _LETTERS, outer_only=True),
    Rule(
        "actor",
        _rx(RAY),
        _h_actor,
        "(",
    ),
    # Only straight after a timestamp: "- INFO - name - ", "| INFO     | mod:fn:12 - ", " INFO "
    Rule(
        "level",
        _rx(
            r"\[?" + _LEVEL_WORD + r"\]?"
            r"(?: - ([\w.<>]{1,200}) - |\s*\|\s*(?:([\w.<>]{1,200}:[\w<>]{1,200}:\d{1,7}) - )?"
            r"|:? +|:$|$)"
        ),
        _h_after_ts,
        "[" + _LETTERS,
        TS_KINDS,
    ),
    # TensorFlow / absl after a timestamp: "2022-07-29 21:30:06.898118: I tensorflow/...cc:384] "
    Rule(
        "glog",
        _rx(r"([IWEF]) ([^\s\]:]{1,300}):(\d{1,7})\] "),
        _h_level_source,
        "IWEF",
        TS_KINDS,
    ),
    Rule(
        "syslog",
        _rx(r"([\w.-]{1,253}) (?:kernel|([\w./-]{1,100})\[(\d{1,10})\]): "),
        _h_syslog_after_iso,
        _LETTERS + _DIGITS,
        TS_KINDS,
    ),
)

# Weak rules are stripped only when a strong prefix follows them, because on
# their own they could just as well be the start of the message.
WEAK: tuple[Rule, ...] = (
    # a tqdm bar whose carriage return was lost when the log was pasted: "Train:  20%|█▉   | 375/1881 [3:40:16<..]"
    # runs straight into the record that followed it
    Rule("progress", _rx(r"(?=[^\n]{0,100}?\d%\|)(?:[^|\n]{0,80}?:)?\s*\d{1,3}%\|[^|\n]{0,200}\|\s*[\d.]{1,12}[kMG]?/"
                         r"[\d.?]{1,12}[kMG]?(?: \[[^\]\n]{0,80}\])?\s*"), _h_nothing, _LETTERS + _DIGITS + " \t"),
    Rule("indent", _rx(r"[ \t]{1,64}"), _h_nothing, " \t"),
    # torchx / NeMo-Run "role/0 " replica prefix
    Rule("replica", _rx(r"[A-Za-z_][\w-]{0,100}/\d{1,7} "), _h_nothing, _LETTERS),
    Rule("stream_name", _rx(r"([\w.-]{1,200}) \[(stdout|stderr)\] "), _h_stream_name, _LETTERS + _DIGITS),
)


