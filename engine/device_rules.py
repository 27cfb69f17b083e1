"""Device-mismatch errors told apart by where they were raised: a model one process spread over GPUs (not P4), a
module on several GPUs handed to DDP with device_ids (not P2), a tensor the model's own code keeps on the CPU (not
P4)."""
from __future__ import annotations

import re

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict
from gpudoctor.engine.textfind import line_at

# torch's device check (TensorIterator / checkAllSameGPU), two wordings: "but found at least two devices, cuda:1 and
# cuda:0!" (1.7-2.2) and "but got target is on cuda:1, different from other tensors on cuda:0" (2.3 on)
_TWO_DEVICES = _lazy(r"Expected all tensors to be on the same device, but (?:found at least two devices, "
                          r"(?P<a>[\w:]+) and (?P<b>[\w:]+)|got \w+ is on (?P<c>[\w:]+), different from other tensors "
                          r"on (?P<d>[\w:]+))")
# anything that says more than one process trained: rank prefixes, launchers, DDP, process groups
_SEVERAL_PROCESSES = _lazy(r"^\[(?:rank|RANK|Rank) ?\d+\]|\[default\d+\]:|\[\d+,\d+\]<std(?:out|err)>|"
                                r"ChildFailedError|ProcessRaisedException|torch\.multiprocessing|\btorchrun\b|"
                                r"torch\.distributed|torch/distributed|DistributedDataParallel|\bDDP\b|\bLOCAL_RANK\b|"
                                r"local_rank|init_process_group|accelerate launch|deepspeed|horovod|world_size",
                                re.MULTILINE)
# a model spread over GPUs by one process: accelerate's big-model dispatch (hooks.py moves each layer's inputs),
# device_map, or the loss computed inside a transformers model's own forward (modeling_*.py), where logits and labels
# come from one batch and only a split model puts them on two GPUs
_SPLIT_MODEL = _lazy(r"modeling_\w+\.py|accelerate[/\\]hooks\.py|device_map|dispatch_model|big_modeling")


def two_gpus_one_process_rule(text: str, file: str) -> list[Verdict]:
    """A loss argument on one GPU and the rest on another, raised inside a model that one process spread over GPUs
    (device_map, accelerate's dispatch, a transformers model computing its own loss), in a log with no sign of a
    second process: the output and labels sit apart because of the split. That is not P4, which is about DDP ranks:
    P4 is ruled out and the note says what it is instead."""
    if "Expected all tensors" not in text:
        return []
    for line_no, line in enumerate(text.splitlines(), 1):
        m = _TWO_DEVICES.search(line)
        if m is None:
            continue
        devices = {d for d in m.group("a", "b", "c", "d") if d}
        if (not all(d.startswith("cuda") for d in devices) or len(devices) < 2 or _SEVERAL_PROCESSES.search(text)
                or not _SPLIT_MODEL.search(text)):
            return []
        return _ruled_out("P4", "rule:two-gpus-one-process", file, line_no, line,
                          f"not P4: line {line_no} names two GPUs ({' and '.join(sorted(devices))}) and nothing in "
                          f"the log shows a second process; one process spread the model over GPUs (device_map, "
                          f"model parallel), so move the labels to the device of the output they are compared with")
    return []


# the older check (ATen's checkSameGPU, torch 1.0-1.9): "to have the same device as tensor for argument #2 'weight'; but
# device 1 does not equal 0"
_OLD_TWO_DEVICES = _lazy(r"to have the same device as tensor for argument #\d+ '\w+'; but device (\d+) does not "
                         r"equal (\d+)")
SPREAD_SCORE = 0.5  # a guess: the same error comes from a model split over GPUs that the log does not name


def two_gpus_unnamed_split_rule(text: str, file: str) -> list[Verdict]:
    """Two GPUs in one operation of a single process, with no device_map or dispatch in sight: the usual way one
    process holds tensors on two GPUs is nn.DataParallel (P1), whose replicas meet a tensor left on the first GPU, or
    which runs behind `python train.py` on a machine with several GPUs (transformers' Trainer wraps the model in it).
    A possible P1, ahead of P4 (a loss or target on the CPU, or on the wrong rank's GPU)."""
    if "Expected all tensors" not in text and "does not equal" not in text:
        return []
    for line_no, line in enumerate(text.splitlines(), 1):
        m = _TWO_DEVICES.search(line)
        if m is not None:
            devices = {d for d in m.group("a", "b", "c", "d") if d}
        else:
            old = _OLD_TWO_DEVICES.search(line)
            devices = {f"cuda:{old.group(1)}", f"cuda:{old.group(2)}"} if old is not None else set()
        if not devices:
            continue
        if (not all(d.startswith("cuda") for d in devices) or len(devices) < 2 or _SEVERAL_PROCESSES.search(text)
                or _SPLIT_MODEL.search(text)):
            return []
        here = Evidence(file, line_no, line, "hint:two-gpus-one-process")
        note = (f"line {line_no} names two GPUs ({' and '.join(sorted(devices))}) and nothing shows a second "
                f"process: nn.DataParallel (or a model split over GPUs) put them in one process")
        return [Verdict("P1", "hint:two-gpus-one-process", (here,), score=SPREAD_SCORE, tier="possible", note=note)]
    return []


# DDP's device_ids check (torch/nn/parallel/distributed.py) fails for a module on the CPU (P2) and for one that a
# device_map spread over several GPUs; the parameter set it prints tells them apart, even across a wrapped line
_DEVICE_IDS_CHECK = _lazy(r"device_ids and output_device arguments\s+only work with single-device[\s\S]{0,300}?"
                               r"module\s+parameters\s+\{(?P<devices>[^}]*)\}")
_CUDA_INDEX = _lazy(r"device\(type='cuda',\s*index=(\d+)\)")


# a process on macOS: its installed packages live under /Users/<name>/ (pyenv, conda, venvs), where torch has no CUDA
_MACOS_PACKAGES = _lazy(r'File "/Users/[^"]*[/\\](?:site|dist)-packages[/\\]')


def macos_module_rule(text: str, file: str) -> list[Verdict]:
    """DDP's device_ids check failing on macOS, where torch has no CUDA: the module on the CPU is meant there, and the
    device_ids passed are the mistake, not P2."""
    if "only work with single-device" not in text or not _MACOS_PACKAGES.search(text):
        return []
    line_no, line = line_at(text, text.find("only work with single-device"))
    return _ruled_out("P2", "rule:ddp-on-macos", file, line_no, line,
                      "not P2: the traceback's packages are installed under /Users (macOS), where torch has no CUDA "
                      "device to move the module to; a CPU (gloo) run must pass device_ids=None")


def multi_device_module_rule(text: str, file: str) -> list[Verdict]:
    """DDP's device_ids check whose module parameters lie on two or more GPUs: a model split over GPUs, not P2."""
    if "only work with single-device" not in text:
        return []
    for m in _DEVICE_IDS_CHECK.finditer(text):
        gpus = set(_CUDA_INDEX.findall(m.group("devices")))
        if len(gpus) < 2:
            continue
        line_no, line = line_at(text, m.start())
        return _ruled_out("P2", "rule:multi-device-module", file, line_no, line,
                          f"not P2: line {line_no} shows the module's parameters on {len(gpus)} GPUs; a model spread "
                          f"over GPUs (device_map) takes no device_ids: pass device_ids=None, or load the whole model "
                          f"on this rank's GPU")
    return []


# the innermost frame of a traceback, as Python prints it: File "path", line N, in function
_FRAME = _lazy(r'^\s*(?:\[\w\s]+\]:\s*)?File "(?P<path>[^"]+)", line \d+, in (?P<func>\w+)')
# a model's own code: a transformers model (installed, or remote code under transformers_modules), or a modeling file
_MODEL_CODE = _lazy(r"(?:^|[/\\])modeling_\w+\.py$|[/\\]transformers[/\\]models[/\\]|[/\\]transformers_modules[/\\]")
_LOSS_WORDS = _lazy(r"loss|criterion|label|target", re.IGNORECASE)
FRAME_LOOK_BACK = 4  # lines between the innermost frame and its error line (the code line, a caret line)


def model_internal_tensor_rule(text: str, file: str) -> list[Verdict]:
    """A cuda-versus-cpu device mismatch raised inside a model's own code, on a line that is no loss or label: a
    tensor the model made or keeps (a rotary cos/sin table, a position buffer, an offloaded weight) is on the CPU,
    which moving the targets does not change: P4 is ruled out. Every such error line whose innermost frame shows must
    be in model code."""
    if "Expected all tensors" not in text:
        return []
    lines = text.splitlines()
    inside: list[tuple[int, str, str]] = []
    for at, line in enumerate(lines):
        m = _TWO_DEVICES.search(line)
        if m is None or "cpu" not in {d for d in m.group("a", "b", "c", "d") if d}:
            continue
        frame = next((k for k in range(at - 1, max(-1, at - 1 - FRAME_LOOK_BACK), -1) if _FRAME.search(lines[k])), None)
        if frame is None:
            continue
        where = _FRAME.search(lines[frame])
        code = " ".join(lines[frame + 1: at])
        if not _MODEL_CODE.search(where.group("path")) or _LOSS_WORDS.search(code + where.group("func")):
            return []
        inside.append((at, where.group("path").replace("\\", "/").rsplit("/", 1)[-1], where.group("func")))
    if not inside:
        return []
    at, name, func = inside[0]
    return _ruled_out("P4", "rule:model-internal-tensor", file, at + 1, lines[at],
                      f"not P4: line {at + 1} is raised inside the model's own code ({name}, in {func}), not where a "
                      f"loss meets its targets: a tensor the model makes or keeps is on the CPU (a buffer left behind "
                      f"by offload or device_map, or model code that does not match the installed library versions)")


def _ruled_out(entry: str, rule: str, file: str, line_no: int, line: str, note: str) -> list[Verdict]:
    """The entry ruled out by the error on this line, with the note that says what it is instead."""
    return [Verdict(entry, rule, (Evidence(file, line_no, line, rule),), rule_out=True, note=note)]


# the caching allocator's OOM names the device: "GPU 2 has a total capacity of" (torch 2.1+), "(GPU 2; 79.14 GiB
# total capacity" (1.x-2.0)
_OOM_GPU = _lazy(r"CUDA out of memory\. Tried to allocate .{0,40}?(?:GPU (\d+) has a total capacity|\(GPU (\d+);)")


def oom_on_own_gpu_rule(text: str, file: str) -> list[Verdict]:
    """Rank N out of memory on GPU N (N above 0): that rank has a GPU of its own, so the ranks did not all land on one
    device: D3 is ruled out. A hard-coded index would put every rank on the same GPU, which rank N's GPU N is not."""
    if "out of memory" not in text or "GPU" not in text:
        return []
    from gpudoctor.engine.prefix import parse_prefix

    for line_no, line in enumerate(text.splitlines(), 1):
        m = _OOM_GPU.search(line)
        if m is None:
            continue
        gpu = int(m.group(1) or m.group(2))
        rank = parse_prefix(line).rank
        if gpu > 0 and rank == gpu:
            # no note: D3 is rarely a candidate beside an OOM, and a note would speak of it on every such log
            return [Verdict("D3", "rule:oom-on-own-gpu", (Evidence(file, line_no, line, "rule:oom-on-own-gpu"),),
                            rule_out=True)]
    return []


# Lightning's check of the requested GPU ids against the visible ones (_sanitize_gpu_ids, fabric/utilities/
# device_parser.py): two lines, or one with a literal \n where the exception's repr was printed
_REQUESTED = _lazy(r"You requested (?:gpu|GPUs): \[(?P<asked>[\d,\s]*)\][\s\S]{0,120}?But your machine only has: "
                   r"\[(?P<has>[\d,\s]*)\]")


def requested_ids_rule(text: str, file: str) -> list[Verdict]:
    """Lightning refusing GPU ids the machine does not have, where no more ids were asked for than it has: one process
    per id still fits, so the ids are wrong (a physical id under CUDA_VISIBLE_DEVICES, devices=[1] on a one-GPU
    machine), not the count: D27 is ruled out. With no GPU at all the signature does not fire in the first place."""
    if "But your machine only has" not in text:
        return []
    m = _REQUESTED.search(text)
    if m is None:
        return []
    asked, has = (re.findall(r"\d+", m.group(g)) for g in ("asked", "has"))
    if not has or len(asked) > len(has):
        return []
    line_no, line = line_at(text, m.start())
    return _ruled_out("D27", "rule:requested-ids-within-count", file, line_no, line,
                      f"not D27: {len(asked)} GPU id(s) asked for and {len(has)} visible, so the count fits; the ids "
                      f"name GPUs this machine does not show (number them from 0 within CUDA_VISIBLE_DEVICES, or "
                      f"pass devices={len(asked)})")


def device_rules(text: str, file: str) -> list[Verdict]:
    return (two_gpus_one_process_rule(text, file) + two_gpus_unnamed_split_rule(text, file)
            + (macos_module_rule(text, file) or multi_device_module_rule(text, file))
            + model_internal_tensor_rule(text, file) + oom_on_own_gpu_rule(text, file) + requested_ids_rule(text, file))
