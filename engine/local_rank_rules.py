"""What the ranks' announced local ranks say (D3).

Lightning logs each process's local rank beside the GPUs it sees, "LOCAL_RANK: {local_rank} - CUDA_VISIBLE_DEVICES:
[{devices}]" (accelerators/gpu.py in 1.x, accelerators/cuda.py from 1.8), and each member of the process group,
"initializing ddp: GLOBAL_RANK: {g}, MEMBER: {g + 1}/{world}" (1.x) or "Initializing distributed: GLOBAL_RANK: {g},
MEMBER: {g + 1}/{world}" (1.5 on, lightning_fabric). A job of `world` processes on nodes that each see V GPUs runs
world / V processes at each local rank. More processes than that at local rank 0, and none above it, are processes
that all took the first GPU of their node (a scheduler that starts the tasks without their local ranks, or a launch
that hands every process the same one): D3. With one GPU visible per process (a per-task binding) every local rank
is 0 by design, and nothing is said.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict

_LOCAL = _lazy(r"LOCAL_RANK: (\d{1,5}) ?- ?CUDA_VISIBLE_DEVICES: \[([\d, ]{0,200})\]")
_MEMBER = _lazy(r"GLOBAL_RANK: (\d{1,6}), MEMBER: \d{1,6}/(\d{1,6})")
SCORE = 0.6


def first_gpu_for_all_rule(text: str, file: str) -> list[Verdict]:
    """D3 when more processes than a node's share announce local rank 0 on nodes that see several GPUs."""
    if "LOCAL_RANK: " not in text or "MEMBER: " not in text:
        return []
    announced = [(int(m.group(1)), m.group(2), m.start()) for m in _LOCAL.finditer(text)]
    members = {int(m.group(1)): int(m.group(2)) for m in _MEMBER.finditer(text)}
    if len(announced) < 2 or len(members) < 2 or any(local for local, _, _ in announced):
        return []
    visible = {tuple(d for d in devices.replace(" ", "").split(",") if d) for _, devices, _ in announced}
    if len(visible) != 1:
        return []
    gpus = len(next(iter(visible)))
    world = max(members.values())
    at_zero = min(len(announced), len(members))  # a restart repeats the announcements; count processes once
    if gpus < 2 or at_zero * gpus <= world:
        return []
    from gpudoctor.engine.textfind import line_at

    line_no, line = line_at(text, announced[0][2])
    why = Evidence(file, line_no, f"{at_zero} processes of a group of {world} announce local rank 0 on nodes that see "
                                  f"{gpus} GPUs, where {world // gpus or 1} would: they all took the first GPU of "
                                  "their node", "because")
    return [Verdict("D3", "rule:every-process-at-local-rank-0",
                    (Evidence(file, line_no, line, "rule:every-process-at-local-rank-0"), why), score=SCORE)]
