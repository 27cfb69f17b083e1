"""Who asked for the default process group before there was one.

torch.distributed's `_get_default_group` ("Default process group has not been initialized, please make sure to call
init_process_group.", torch 1.8-2.x) and the older `_check_default_pg` ("Default process group is not initialized",
torch 1.0-1.7) raise for every caller alike. The traceback's innermost frame outside torch.distributed names the
caller. Where that is the job's own code (a `get_rank()` in a model's constructor, a `get_world_size()` that
partitions the dataset), the script was written to run under a launcher and was started without one (D1).

Where it is SyncBatchNorm (torch/nn/modules/batchnorm.py, mmcv's or apex's), the same message comes from a
one-process run whose model or config asks for a cross-GPU BatchNorm: still no group because no launcher ran (D1, by
the entry's own symptom and the labelling rule of the public logs), and the evidence points to the fix step for a run
meant for one GPU (plain BatchNorm, or torchrun with one process). A traceback printed without the caller's frame
proves nothing either way. Where the error line stands ahead of its frames (an issue title, a paste in reverse), the
frames below it count when they reach torch.distributed or the caller's own line calls it.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import LOOK_BACK, Verdict, clean_code

_ERROR = _lazy(r"(?:Error|Exception)\b.*Default process group (?:has not been|is not) initiali[sz]ed")
_FRAME = _lazy(r"""File "([^"]+)", line \d+, in (\S+)""")
_IN_C10D = _lazy(r"torch[/\\]distributed[/\\]|c10d_logger|distributed_c10d")
_RAISED = _lazy(r"^\W*(?:\w+\.)*\w*(?:Error|Exception)\b")
_CALLS_C10D = _lazy(r"\b(?:dist|distributed)\.(?:get_rank|get_world_size|all_gather\w*|all_reduce|barrier|broadcast\w*)\(")
# cross-GPU BatchNorm: torch's SyncBatchNorm.forward, mmcv's and apex's, and any frame or code line naming it
_SYNC_BN = _lazy(r"(?i)batchnorm|sync_?bn\b|syncbn|SyncBatchNorm|sync_batch_norm")
SCORE = 0.8
# torch_xla's process launcher (xmp.spawn), in a frame of the traceback
_XLA_SPAWN = _lazy(r"torch_xla[/\\]distributed[/\\]xla_multiprocessing\.py|\bxmp\.spawn\(")
XLA_NOTE = ("torch_xla started these workers (one per TPU core), so a launcher did run; a default process group "
            "asked for under XLA is a code path the library does not support on that backend")
SYNC_BN_SCORE = 0.7  # the same message, from a layer the model config chose
CUT_SCORE = 0.6  # the message itself is not in the log, only the frame that raises it
# the innermost frame of a cut traceback inside the function that raises the missing-group error (its name may be cut)
_RAISER_FRAME = _lazy(r"distributed_c10d\.py\"?,? line \d+, in (_get_default_g\w*|_check_default_pg\w*)\s*$")


def _caller(lines: list[str], at: int) -> int | None:
    """Index of the innermost frame above lines[at] that is not torch.distributed's own, or None."""
    for i in range(at - 1, max(-1, at - LOOK_BACK), -1):
        m = _FRAME.search(lines[i])
        if m is None:
            continue
        if not _IN_C10D.search(m.group(1)):
            return i
    return None


def _caller_below(lines: list[str], at: int) -> int | None:
    """The same, from the frames printed below lines[at] up to the next error line: those frames must reach
    torch.distributed, or the caller's own source line must call it."""
    frames = []
    for j in range(at + 1, min(len(lines), at + LOOK_BACK)):
        if _RAISED.search(lines[j]):
            break
        m = _FRAME.search(lines[j])
        if m is not None:
            frames.append((j, bool(_IN_C10D.search(m.group(1)))))
    outside = [j for j, in_c10d in frames if not in_c10d]
    if not outside:
        return None
    i = outside[-1]
    code = lines[i + 1] if i + 1 < len(lines) else ""
    if any(in_c10d for _, in_c10d in frames) or _CALLS_C10D.search(code):
        return i
    return None


def no_group_caller_rule(text: str, file: str) -> list[Verdict]:
    """D1 when the job's own code asked torch.distributed for its rank or size before any group was made."""
    if "process group" not in text:
        if "_get_default_g" in text or "_check_default_pg" in text:
            return _cut_in_the_raiser(text.splitlines(), file)
        return []
    lines = text.splitlines()
    for at, line in enumerate(lines):
        if "Default process group" not in line or not _ERROR.search(line):
            continue
        xla = _xla_workers(file, lines, at)
        if xla is not None:
            return [xla]
        i = _caller(lines, at)
        if i is None:
            i = _caller_below(lines, at)
        if i is None:
            return []
        start = max(0, at - LOOK_BACK)
        sync_bn = next((j for j in range(start, max(at, i + 1) + 1) if _SYNC_BN.search(lines[j])), None)
        if sync_bn is not None:
            return [_sync_bn_verdict(file, at, line, sync_bn, lines[sync_bn])]
        what = clean_code(lines[i])
        if i + 1 < len(lines) and i + 1 != at and not _FRAME.search(lines[i + 1]):
            what += " " + clean_code(lines[i + 1])  # the caller's source line
        here = Evidence(file, at + 1, line, "rule:group-asked-for-by-the-script")
        why = Evidence(file, i + 1, f"asked for by the job's own code: {what}", "because")
        note = (f"line {i + 1}: the job's own code asks torch.distributed for the group's rank or size, code written "
                "to run under a launcher; started as a plain process, no process group exists")
        return [Verdict("D1", "rule:group-asked-for-by-the-script", (here, why), score=SCORE, note=note)]
    return _cut_in_the_raiser(lines, file)


def _cut_in_the_raiser(lines: list[str], file: str) -> list[Verdict]:
    """A traceback cut at its innermost frame, where that frame is torch.distributed's `_get_default_group` or
    `_check_default_pg`: those functions raise nothing but the missing-group error, so the frame is the message."""
    last = len(lines) - 1
    while last >= 0 and not lines[last].strip():
        last -= 1
    if last < 0 or not _RAISER_FRAME.search(lines[last]):
        return []
    i = _caller(lines, last)
    if i is None:
        return []
    region = lines[max(0, last - LOOK_BACK): last + 1]
    if any(_SYNC_BN.search(x) for x in region) or any(_XLA_SPAWN.search(x) for x in region):
        return []  # left to the signatures' reading of a whole message, as the uncut cases above are
    here = Evidence(file, last + 1, lines[last], "rule:group-asked-for-by-the-script")
    why = Evidence(file, i + 1, f"asked for by the job's own code: {clean_code(lines[i])}", "because")
    note = (f"line {last + 1}: the traceback is cut inside torch.distributed's {_RAISER_FRAME.search(lines[last])[1]}, "
            "which raises only 'Default process group has not been initialized'; the job's own code on line "
            f"{i + 1} asked for the group in a process that has none")
    return [Verdict("D1", "rule:group-asked-for-by-the-script", (here, why), score=CUT_SCORE, note=note)]


def _xla_workers(file: str, lines: list[str], at: int) -> Verdict | None:
    """Not D1 where torch_xla's multiprocessing started the workers (a TPU job): they were launched, one per core,
    and their collectives go through XLA; a code path that asks torch.distributed for its default group there is
    one the library does not support on that backend, which no launcher change fixes."""
    for j in range(max(0, at - LOOK_BACK), min(len(lines), at + LOOK_BACK)):
        if _XLA_SPAWN.search(lines[j]):
            here = Evidence(file, j + 1, lines[j], "rule:xla-workers-launched")
            return Verdict("D1", "rule:xla-workers-launched", (here,), rule_out=True, note=XLA_NOTE)
    return None


def _sync_bn_verdict(file: str, at: int, line: str, j: int, sync_bn: str) -> Verdict:
    """D1 where the one asking is a cross-GPU BatchNorm: the fix for a one-GPU run is the config, not a launcher."""
    here = Evidence(file, at + 1, line, "rule:syncbn-without-group")
    why = Evidence(file, j + 1, f"asked for by a cross-GPU BatchNorm: {clean_code(sync_bn)}", "because")
    note = ("a SyncBatchNorm layer asks torch.distributed for the group's size; in a process started without a "
            "launcher there is none. For a run meant for one GPU, use plain BatchNorm (or start it with torchrun "
            "--nproc-per-node=1)")
    return Verdict("D1", "rule:syncbn-without-group", (here, why), score=SYNC_BN_SCORE, note=note)
