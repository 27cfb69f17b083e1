"""A step on one rank that ran as long as the collective timeout: the others gave up waiting for it (MN3).

The classic way a healthy run dies at the default timeout: the main process tokenises a dataset, caches latents or
indexes files (inside `main_process_first`, before a barrier) while every other rank already waits in the barrier.
When that step takes longer than the process group's timeout (1800 s by default; 600 s for NCCL from torch 2.2 when
the script passes none), the waiting ranks' collective or store read times out and the run ends, with the main
process's progress bar still running. The log then shows tqdm's bar (`47%|███ | 1695000/3634744 [30:09<33:25, ...]`)
whose elapsed time equals the timeout, followed by the waiting ranks' timeout or the traceback of their barrier.

tqdm prints elapsed time as MM:SS or H:MM:SS (tqdm.format_interval); the timeout in force is the one the log states
(`Timeout(ms)=`, `timed out after Nms`, `ddp_timeout`), or else a default.
"""
from __future__ import annotations

import re

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict

# a tqdm bar that has not finished: "n/total [elapsed<remaining" with remaining not 00:00 (or "?")
_BAR = _lazy(r"\|\s*([\d.]+[kMGT]?)/([\d.]+[kMGT]?)\s*\[(?:(\d+):)?(\d{1,2}):(\d\d)<(\?|[\d:]+)")
_STATED = _lazy(r"Timeout\(ms\)=(\d+)|timed out after (\d+) ?ms|wait timeout after (\d+) ?ms|"
                r"socket timed out after (\d+) ?ms|timeout of (\d+) ?ms|ddp_timeout\W{1,4}(\d+)\b")
# the waiting ranks' end: a timeout, or the frames of the collective or store call they were waiting in
_WAITED = _lazy(r"[Tt]imed out|[Tt]imeout|timing out|DEADLINE_EXCEEDED|\bbarrier\b|main_process_first|"
                r"wait_for_everyone|all_reduce|allreduce|\bbroadcast\b|store->get|ncclUniqueId|DistStoreError")
# the rank's own error after the bar: then the bar's length is a coincidence, the error is the cause
_OWN_ERROR = _lazy(r"OutOfMemoryError|out of memory|Killed|SIGKILL|Segmentation fault|CUDA error|"
                   r"\b(?:Key|Value|Type|Index|Attribute|Assertion|NotImplemented|Import|ModuleNotFound)Error\b")
DEFAULTS = (1800, 600)  # torch's process-group default; NCCL's own from torch 2.2 (kProcessGroupNCCLDefaultTimeout)
# the bar may start a little after the others began waiting, and print on until the run is torn down: a window
# in proportion to the timeout (27:00-34:30 for 30 minutes, 9:00-11:30 for 10)
EARLY, LATE = 0.1, 0.15
SCORE = 0.8
WINDOW = 80  # lines after the wait's first sign read for the rank's own error
LOOKBACK = 64 << 10  # characters before a wait searched for the bar (tqdm's \r redraws make long lines)


def clock_seconds(clock: str) -> int:
    """tqdm's MM:SS or H:MM:SS as seconds."""
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


def _seconds(m: re.Match) -> int:
    return int(m.group(3) or 0) * 3600 + int(m.group(4)) * 60 + int(m.group(5))


def _unfinished(m: re.Match) -> bool:
    return m.group(1) != m.group(2) and m.group(6) not in ("00:00", "0:00:00")


def _stated(text: str) -> list[int]:
    out = []
    for m in _STATED.finditer(text):
        value = next(int(g) for g in m.groups() if g)
        out.append(value if m.group(6) else value // 1000)
    return sorted(set(out))


def slow_step_rule(text: str, file: str) -> list[Verdict]:
    """MN3 when the last progress bar before the waiting ranks' failure was still running, as long as the timeout.

    The bars are found in one pass and each sign of a wait looks up the one before it: a kept log of 4 MiB can be
    nothing but bars, or thousands of collective names."""
    if "%|" not in text:  # tqdm's default bar opens "NN%|": no bar, no regex compiled
        return []
    from bisect import bisect_left

    from gpudoctor.engine.textfind import line_at

    bars = list(_BAR.finditer(text))  # one pass; each wait then finds the bar before it by bisection
    starts = [b.start() for b in bars]
    for wait in _waits(text):
        k = bisect_left(starts, wait.start()) - 1
        if k < 0 or bars[k].end() > wait.start() or wait.start() - bars[k].start() > LOOKBACK:
            continue  # a wait with no bar just before it (a config echo, an earlier phase): the next one may have one
        bar = bars[k]
        if not _unfinished(bar):
            return []  # the step had finished before the wait ended
        end = wait.end()
        for _ in range(WINDOW):
            end = text.find("\n", end + 1)
            if end < 0:
                end = len(text)
                break
        if _OWN_ERROR.search(text, text.rfind("\n", 0, wait.start()) + 1, end):
            return []  # the rank's own error follows the bar: the error is the cause, the bar's length a coincidence
        elapsed = _seconds(bar)
        limit = next((t for t in _stated(text) or DEFAULTS if t * (1 - EARLY) <= elapsed <= t * (1 + LATE)), None)
        if limit is None:
            return []
        bar_line = text.count("\n", 0, bar.start()) + 1
        wait_line, wait_text = line_at(text, wait.start())
        shown = bar.group(0).lstrip("| ").strip()
        why = Evidence(file, bar_line, f"a progress bar still running after {_clock(elapsed)} ({shown}), "
                                       f"as long as the {_clock(limit)} timeout", "because")
        here = Evidence(file, wait_line, wait_text, "rule:step-as-long-as-timeout")
        note = (f"line {bar_line}: one rank's step (the progress bar) had run {_clock(elapsed)} when the others' "
                f"wait ended at the {_clock(limit)} timeout; a step that long on one rank (dataset preprocessing "
                f"under main_process_first, caching) needs a longer timeout or to be done before the run")
        return [Verdict("MN3", "rule:step-as-long-as-timeout", (here, why), score=SCORE, note=note)]
    return []


# the first words of _WAITED's alternatives: found with str.find, each place then confirmed by the regex (a regex
# scan of a 4 MiB log runs at a tenth of the speed)
_WAIT_WORDS = ("Timed out", "timed out", "Timeout", "timeout", "timing out", "DEADLINE_EXCEEDED", "barrier",
               "main_process_first", "wait_for_everyone", "all_reduce", "allreduce", "broadcast", "store->get",
               "ncclUniqueId", "DistStoreError")


def _waits(text: str):
    """_WAITED's matches in the order they occur."""
    places = set()
    for word in _WAIT_WORDS:
        at = text.find(word)
        while at >= 0:
            places.add(at)
            at = text.find(word, at + 1)
    for at in sorted(places):
        m = _WAITED.match(text, at)
        if m is not None:
            yield m


def _clock(seconds: int) -> str:
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


_TIMED_OUT = _lazy(r"[Tt]imed out|[Tt]imeout\b|timing out|DEADLINE_EXCEEDED|DistStoreError")


def slow_step_across(texts: dict[str, str]) -> list[Verdict]:
    """slow_step_rule for per-rank files: the bar is in one rank's file (rank 0 tokenising, still running and with no
    error of its own after it), the timeout in another's. Each file alone shows half of it: a rank that printed
    nothing wrong, and a rank that timed out waiting (which reads as a peer that failed, D20)."""
    from gpudoctor.engine.textfind import line_at

    bars = {}
    for name, text in texts.items():
        if "%|" not in text:
            continue
        last = None
        for last in _BAR.finditer(text):
            pass
        if last is not None and _unfinished(last) and not _OWN_ERROR.search(text, last.end()):
            bars[name] = last
    if not bars:
        return []
    for name, text in texts.items():
        if name in bars:
            continue
        timed_out = _TIMED_OUT.search(text)
        if timed_out is None or _OWN_ERROR.search(text):
            continue
        limits = _stated(text) or DEFAULTS
        for bar_file, bar in bars.items():
            elapsed = _seconds(bar)
            limit = next((t for t in limits if t * (1 - EARLY) <= elapsed <= t * (1 + LATE)), None)
            if limit is None:
                continue
            bar_line = texts[bar_file].count("\n", 0, bar.start()) + 1
            wait_line, wait_text = line_at(text, timed_out.start())
            shown = bar.group(0).lstrip("| ").strip()
            here = Evidence(name, wait_line, wait_text, "rule:step-as-long-as-timeout")
            why = Evidence(bar_file, bar_line, f"a progress bar still running after {_clock(elapsed)} ({shown}), "
                                               f"as long as the {_clock(limit)} timeout", "because")
            note = (f"{bar_file} line {bar_line}: that rank's step (the progress bar) had run {_clock(elapsed)} when "
                    f"{name}'s wait ended at the {_clock(limit)} timeout; a step that long on one rank (dataset "
                    "preprocessing under main_process_first, caching) needs a longer timeout or to be done before "
                    "the run")
            return [Verdict("MN3", "rule:step-as-long-as-timeout", (here, why), score=SCORE, note=note)]
    return []
