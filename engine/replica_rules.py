"""Which DataParallel replica failed: an error only a copy of the model meets is DataParallel's own (P1).

nn.DataParallel runs the original module on device_ids[0] as replica 0 and copies of it on the other GPUs as
replicas 1 and up; torch/nn/parallel/parallel_apply.py re-raises a replica's error as "Caught {type} in replica {i}
on device {device}." (torch 1.3-2.x). Replica 0 runs the same code a single-GPU run would, so an error there is the
script's own as often as not. What fails in replica 1 and up but not in a one-GPU run is what replication leaves
behind: a tensor kept on the first GPU (an attribute, a plain list, a module built after wrapping), attributes set
in forward, a ParameterList that appears empty in the copies. One process per GPU (DDP) has no replicas to get wrong.

The same holds for a device-mismatch error raised under parallel_apply's worker thread: an input on GPU k met a
weight still on GPU 0. A CUDA out-of-memory error in a replica is left to the signatures: it follows from the batch
size as often as from DataParallel's lopsided first GPU.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict

_CAUGHT = _lazy(r"Caught (\w+) in replica (\d+) on device (\d+)")
_WORKER = _lazy(r"parallel_apply\.py\S*,? (?:line \d+, )?in _worker\b")
_MISMATCH = _lazy(r"Expected all tensors to be on the same device|to have the same device as tensor for argument|"
                  r"but device \d+ does not equal \d+|Input type \(torch\.cuda\.\w+\) and weight type \(torch\.cuda\.")
_OOM = _lazy(r"out of memory|OutOfMemoryError")
MAX_LINES = 20_000
SCORE = 0.75


# DataParallel's own frames: its forward, replicate, scatter/gather, parallel_apply and the replica thread
_DP_FRAME = _lazy(r"torch[/\\]nn[/\\]parallel[/\\](?:data_parallel|parallel_apply|replicate|scatter_gather)\.py")
_FRAME = _lazy(r'^\W*(?:\[[^\]]{1,40}\]:?\s*)?File "')
CUT_SCORE = 0.5  # a guess: the error DataParallel re-raised is not in the log


def replica_rule(text: str, file: str) -> list[Verdict]:
    """P1 when a DataParallel replica past the first failed, or a worker thread met a tensor on another GPU."""
    if "replica" not in text and "parallel_apply" not in text:
        return _cut_in_data_parallel(text, file) if "data_parallel" in text else []
    if _OOM.search(text):
        return []
    lines = text.splitlines()[:MAX_LINES]
    for i, line in enumerate(lines):
        m = _CAUGHT.search(line)
        if m is not None and int(m.group(2)) >= 1:
            note = (f"line {i + 1}: replica {m.group(2)}, a copy DataParallel made of the model, failed; replica 0 "
                    "(the original, on the first GPU) runs what a one-GPU run would")
            return [Verdict("P1", "rule:dataparallel-copy-failed", (
                Evidence(file, i + 1, line, "rule:dataparallel-copy-failed"),), score=SCORE, note=note)]
    worker = next((i for i, line in enumerate(lines) if _WORKER.search(line)), None)
    if worker is None:
        return _cut_in_data_parallel(text, file)
    error = next((i for i in range(worker + 1, len(lines)) if _MISMATCH.search(lines[i])), None)
    if error is None:
        return _cut_in_data_parallel(text, file)
    note = (f"line {error + 1}: inside DataParallel's worker thread (line {worker + 1}) an input met a tensor on "
            "another GPU: a tensor the replicas do not carry with them")
    return [Verdict("P1", "rule:dataparallel-copy-failed", (
        Evidence(file, error + 1, lines[error], "rule:dataparallel-copy-failed"),
        Evidence(file, worker + 1, f"raised in DataParallel's replica thread: {lines[worker].strip()[:200]}",
                 "because")), score=SCORE, note=note)]


def _cut_in_data_parallel(text: str, file: str) -> list[Verdict]:
    """A possible P1 where a traceback is cut inside DataParallel's own frames: the error a replica raised is not in
    the log, but it came out of DataParallel's copies of the model."""
    lines = text.rstrip().splitlines()[-4:]
    frames = [i for i, line in enumerate(lines) if _FRAME.search(line)]
    # cut: after the innermost frame at most its own source line, indented, and no error line
    if not frames or len(lines) - frames[-1] > 2 or (len(lines) - frames[-1] == 2 and lines[-1][:1] not in " \t"):
        return []
    if '", line' not in lines[frames[-1]]:
        frames.pop()  # the last frame's own path was cut: the one above it is the innermost that can be read
    if not frames or not _DP_FRAME.search(lines[frames[-1]]):
        return []
    at = len(text.rstrip().splitlines()) - len(lines) + frames[-1]
    here = Evidence(file, at + 1, lines[frames[-1]], "hint:cut-inside-dataparallel")
    return [Verdict("P1", "hint:cut-inside-dataparallel", (here,), score=CUT_SCORE, tier="possible")]
