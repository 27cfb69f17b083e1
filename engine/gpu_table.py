"""nvidia-smi's process table with one program's processes stacked on one GPU: ranks that touched GPU 0 (D3).

nvidia-smi lists each process holding a CUDA context as "| GPU  GI  CI  PID  Type  Process name  GPU Memory |"
(older drivers: "| GPU  PID  Type  Process name  Usage |"). A DDP job that pins each rank to its own GPU shows one
process of the program per GPU. When ranks create a context on the first visible GPU before (or without)
set_device, every rank's process also appears on GPU 0, holding only a context's worth of memory (a few hundred
MiB up to about 1.5 GiB) beside rank 0's real usage; when they never move at all, all of them sit there.
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

_ROW = _lazy(r"^\|?\s*(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(?:C\+G|C|G|M)\s+(\S(?:.*\S)?)\s+(\d+)\s*MiB\s*\|?\s*$")
CONTEXT_MIB = 1536  # the most a bare CUDA context (with cuDNN/cuBLAS handles) holds on the GPUs of these logs
MIN_PROCESSES = 3
SCORE = 0.8


def stacked_processes_rule(text: str, file: str) -> list:
    if "MiB" not in text:
        return []
    from gpudoctor.engine.rules import Verdict
    from gpudoctor.engine.textfind import lines_with

    rows: dict[tuple[str, str], dict[str, tuple[int, int, str]]] = {}
    for n, line in lines_with(text, "MiB"):
        found = _ROW.search(line)
        if found:
            gpu, pid, name, mib = found.group(1), found.group(2), found.group(3), int(found.group(4))
            program = name.rsplit("/", 1)[-1]
            rows.setdefault((gpu, program), {}).setdefault(pid, (mib, n, line.strip()))
    for (gpu, program), pids in rows.items():
        small = [p for p, (mib, _, _) in pids.items() if mib <= CONTEXT_MIB]
        if len(pids) < MIN_PROCESSES or len(small) < 2:
            continue
        first = min(pids.values(), key=lambda v: v[1])
        note = (f"line {first[1]}: nvidia-smi shows {len(pids)} processes of {program} on GPU {gpu}, {len(small)} of "
                f"them holding only a CUDA context's worth of memory: the ranks created contexts on GPU {gpu} "
                "before or instead of their own device (D3: set_device(local_rank) first)")
        return [Verdict("D3", "rule:processes-stacked-on-one-gpu", (Evidence(file, first[1], first[2],
                        "rule:processes-stacked-on-one-gpu"),), score=SCORE, note=note)]
    return []
