"""Evidence about NCCL's shared-memory segments in /dev/shm (D24): why a segment could not be made, and the bus
error that a full /dev/shm raises inside NCCL.

NCCL makes each segment with open/shm_open, ftruncate or posix_fallocate and mmap, and reports a failed call as
WARN "Call to %s failed : %s" with strerror (src/include/shm.h in 2.4-2.11, src/misc/shmutils.cc's SYSCHECK from
2.12). "No space left on device" is the full /dev/shm of a container (D24's cause); "Permission denied" or "Read-only
file system" is a /dev/shm NCCL may not write at all, another cause with the same "Error while creating shared
memory segment" line after it. Before NCCL reserved the space up front, a full tmpfs let the mmap succeed and
faulted on first touch: a SIGBUS ("Bus error") inside NCCL's own frames. Without a backtrace the same fault shows
in torchrun's failure report as ranks killed by signal 7 ("exitcode : -7", "Signal 7 (SIGBUS) received by PID"): the
training processes themselves, not DataLoader workers (whose bus error the loader reports as its own RuntimeError).
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict
from gpudoctor.engine.textfind import lines_with

_CALL_FAILED = _lazy(r"Call to (?P<call>shm_open|open|ftruncate|posix_fallocate|fallocate|mmap) failed ?: (?P<why>[^\n]+)")
_REFUSED = ("Permission denied", "Read-only file system", "Operation not permitted")
_FULL = ("No space left on device",)
_BUS = _lazy(r"\bBus error\b|\bSIGBUS\b|Caught signal 7\b")
_NCCL_FRAME = _lazy(r"(?i)\bnccl\w*|libnccl")
BUS_WINDOW = 20  # lines of a crash report's backtrace read after the signal line


_RANK_SIGBUS = _lazy(r"rank\s*:\s*(\d+)[^\n]*\n(?:[^\n]*\n){0,3}?\s*exitcode\s*:\s*-7\b")
# torch.distributed.elastic's own line for the first local rank that failed (torch 1.9-2.x, multiprocessing/api.py)
_ELASTIC_SIGBUS = _lazy(r"failed \(exitcode: -7\) local_rank: (\d+)")
# the DeepSpeed launcher's own line once a rank ended (deepspeed/launcher/launch.py sigkill_handler, 0.3-0.16):
# "{cmd} exits with return code = {code}", cmd being the rank's argv with its --local_rank
_DS_SIGBUS = _lazy(r"exits with return code = -7\b")
_DS_LOCAL_RANK = _lazy(r"--local_rank=(\d+)")
_LOADER_BUS = _lazy(r"DataLoader worker \(pid[^)]*\) is killed by signal: Bus error|Unexpected bus error encountered in worker")


def shm_rules(text: str, file: str) -> list[Verdict]:
    return _refused(text, file) + (_bus_error(text, file) or _ranks_bus_error(text, file))


def _refused(text: str, file: str) -> list[Verdict]:
    """A segment NCCL was refused (not out of space): D24's full /dev/shm is ruled out."""
    if "Call to " not in text:
        return []
    refused = None
    for line_no, line in lines_with(text, "Call to "):
        m = _CALL_FAILED.search(line)
        if m is None:
            continue
        why = m.group("why").strip()
        if any(w in why for w in _FULL):
            return []  # out of space after all: D24 stands
        if refused is None and any(w in why for w in _REFUSED):
            refused = (line_no, line, m.group("call"), why)
    if refused is None:
        return []
    line_no, line, call, why = refused
    note = (f"{file}: NCCL's {call}() in /dev/shm failed with \"{why}\": /dev/shm refused the segment, it is not too "
            f"small; check who may write there (its mode should be 1777) rather than its size")
    return [Verdict("D24", "rule:shm-refused", (Evidence(file, line_no, line, "rule:shm-refused"),), rule_out=True,
                    note=note)]


def _bus_error(text: str, file: str) -> list[Verdict]:
    """A bus error whose backtrace runs through NCCL: a segment in a full /dev/shm touched for the first time."""
    if "Bus error" not in text and "SIGBUS" not in text and "signal 7" not in text:
        return []
    lines = text.split("\n")
    for at, line in enumerate(lines):
        if not _BUS.search(line) or "DataLoader" in line or "dataloader" in line:
            continue  # (a DataLoader worker's bus error is the same full /dev/shm, but not NCCL's: not D24)
        for k in range(at, min(len(lines), at + BUS_WINDOW)):
            if _NCCL_FRAME.search(lines[k]):
                evidence = (Evidence(file, at + 1, line, "rule:nccl-bus-error"),
                            Evidence(file, k + 1, lines[k], "rule:nccl-bus-error"),
                            Evidence(file, at + 1, "a bus error inside NCCL: its shared-memory segment in /dev/shm was "
                                                   "mapped but the space behind it ran out when first touched",
                                     "because"))
                return [Verdict("D24", "rule:nccl-bus-error", evidence, score=0.85)]
    return []


def _ranks_bus_error(text: str, file: str) -> list[Verdict]:
    """torchrun's failure report with two or more ranks killed by SIGBUS and no DataLoader bus error: the training
    processes faulted on shared memory together, which a full /dev/shm under NCCL's segments does. A single rank
    killed so (elastic's "failed (exitcode: -7) local_rank: N" line) is only a lean."""
    if "-7" not in text or _LOADER_BUS.search(text):
        return []
    if "exitcode" not in text:
        return _launcher_sigbus(text, file)
    from gpudoctor.engine.textfind import line_at

    ranks: dict[str, int] = {}
    for m in _RANK_SIGBUS.finditer(text):
        ranks.setdefault(m.group(1), m.start())
    if len(ranks) < 2:
        # one training process killed by SIGBUS: shared memory is the usual cause under several ranks, but a
        # memory-mapped file truncated behind a single reader faults the same way, so it stays a lean
        m = _ELASTIC_SIGBUS.search(text) or _RANK_SIGBUS.search(text)
        if m is None:
            return []
        return _sigbus_lean(file, *line_at(text, m.start()), f"rank {m.group(1)} was killed by SIGBUS (exit code -7)")
    first, line = line_at(text, min(ranks.values()))
    evidence = (Evidence(file, first, line, "rule:ranks-killed-by-sigbus"),
                Evidence(file, first, f"ranks {', '.join(sorted(ranks, key=int))} were killed by SIGBUS (exit code "
                                      "-7) together: shared memory they had mapped ran out behind them", "because"))
    return [Verdict("D24", "rule:ranks-killed-by-sigbus", evidence, score=0.75)]


def _launcher_sigbus(text: str, file: str) -> list[Verdict]:
    """The DeepSpeed launcher's report of a rank that ended by SIGBUS (return code -7): a lean to D24, as one rank
    killed so is under torchrun."""
    m = _DS_SIGBUS.search(text)
    if m is None:
        return []
    from gpudoctor.engine.textfind import line_at

    at, line = line_at(text, m.start())
    rank = _DS_LOCAL_RANK.search(line)  # the rank's argv, on the same line before the words
    who = f"the rank with local rank {rank.group(1)}" if rank else "a rank"
    return _sigbus_lean(file, at, line, f"the DeepSpeed launcher reports {who} ended by SIGBUS (return code -7)")


def _sigbus_lean(file: str, at: int, line: str, what: str) -> list[Verdict]:
    """One training process ended by SIGBUS, as `what` says: shared memory is the usual cause under several ranks,
    but a memory-mapped file truncated behind a single reader faults the same way, so it stays a lean to D24."""
    why = f"{what}: memory it had mapped, most often a shared-memory segment in /dev/shm, had no space behind it"
    return [Verdict("D24", "hint:rank-killed-by-sigbus",
                    (Evidence(file, at, line, "hint:rank-killed-by-sigbus"), Evidence(file, at, why, "because")),
                    score=0.5, tier="possible")]
