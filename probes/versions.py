"""Versions: torch, CUDA runtime, NCCL, driver, Python, DeepSpeed/accelerate, and combinations known not to work."""
from __future__ import annotations

import platform
import re
from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, ruled_out, skipped

COMPANIONS = ("deepspeed", "accelerate", "transformers")


def installed_version(distribution: str) -> str | None:
    """A package's version from its metadata, without importing it."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def version_tuple(text: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0); stops at the first part that is not a number."""
    parts = []
    for piece in re.split(r"[.+-]", text.strip()):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def torch_requirement_problems(distribution: str, torch_version: str) -> list[str]:
    """What an installed package declares it needs from torch, checked against the installed torch."""
    from importlib import metadata

    try:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return []
    problems = []
    base = ".".join(map(str, version_tuple(torch_version)))
    for line in metadata.requires(distribution) or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() != "torch" or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        try:
            ok = req.specifier.contains(Version(base), prereleases=True)
        except InvalidVersion:
            continue
        if not ok:
            problems.append(f"{distribution} {installed_version(distribution)} requires torch{req.specifier}, "
                            f"installed is {torch_version}")
    return problems


def driver_cuda_version(options: Mapping) -> str | None:
    """The newest CUDA the driver supports, from nvidia-smi's banner ("CUDA Version: 12.4")."""
    out = hostinfo.run_command(options, ["nvidia-smi"])
    if out and out.returncode == 0:
        m = re.search(r"CUDA Version:\s*([0-9.]+)", out.stdout)
        if m:
            return m.group(1)
    return None


def torch_facts() -> dict:
    """What the installed torch was built with; imports torch (seconds), so only the probe calls it."""
    import torch
    import torch.distributed as dist

    facts = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda,
             "hip": getattr(torch.version, "hip", None), "distributed": dist.is_available()}
    if facts["distributed"]:
        facts["gloo"] = dist.is_gloo_available()
        facts["nccl_backend"] = dist.is_nccl_available()
    if torch.version.cuda:
        try:
            facts["cuda_available"] = torch.cuda.is_available()
            facts["gpu_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
        except Exception as exc:  # a broken driver install raises here; that is itself the finding
            facts["cuda_error"] = f"{type(exc).__name__}: {exc}"[:200]
        try:
            nccl = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception:
            facts["nccl"] = None
        try:
            facts["cudnn"] = torch.backends.cudnn.version()
        except Exception:
            facts["cudnn"] = None
    return facts


def probe(options: Mapping) -> Result:
    env = hostinfo.environ(options)
    driver = hostinfo.driver_version(options)
    gpus = hostinfo.physical_gpu_count(options) if driver else 0
    figures: dict = {"python": platform.python_version(), "driver": driver, "gpus": gpus}
    for name in COMPANIONS:
        figures[name] = installed_version(name)
    companions = ", ".join(f"{n} {figures[n]}" for n in COMPANIONS if figures[n]) or "no deepspeed/accelerate"
    evidence = [f"Python {figures['python']}; NVIDIA driver {driver or 'none'}; GPUs {gpus}; {companions}"]
    torch_version = installed_version("torch")
    if not torch_version or not hostinfo.torch_installed():
        return skipped("torch is not installed in this environment", evidence, figures)
    facts = torch_facts()
    figures.update(facts)
    driver_cuda = driver_cuda_version(options) if driver else None
    figures["driver_cuda"] = driver_cuda
    build = f"CUDA {facts['cuda_runtime']}" if facts["cuda_runtime"] else ("ROCm " + facts["hip"] if facts["hip"]
                                                                             else "CPU build")
    evidence.insert(0, f"torch {facts['torch']} ({build}); NCCL {facts.get('nccl') or '-'}; "
                       f"cuDNN {facts.get('cudnn') or '-'}; driver CUDA {driver_cuda or '-'}")
    problems = combination_problems(facts, gpus, driver, driver_cuda, env)
    for name in COMPANIONS:
        if figures[name]:
            problems += torch_requirement_problems(name, facts["torch"])
    if problems:
        return confirmed(problems[0], evidence + [f"problem: {p}" for p in problems[1:]], figures)
    backends = "nccl+gloo" if facts.get("nccl_backend") else ("gloo" if facts.get("gloo") else "no backend")
    return ruled_out(f"torch {facts['torch']} ({build}, {backends}); no known-bad combination", evidence, figures)


def combination_problems(facts: Mapping, gpus: int, driver: str | None, driver_cuda: str | None,
                         env: Mapping[str, str]) -> list[str]:
    """Combinations with a name: each problem says what breaks and why."""
    problems = []
    runtime = facts.get("cuda_runtime")
    if not facts.get("distributed"):
        problems.append("this torch was built without torch.distributed: no process group can form")
    if gpus and driver and not runtime and not facts.get("hip"):
        problems.append(f"torch {facts['torch']} is a CPU build but {gpus} NVIDIA GPU(s) are here: "
                        "no CUDA, no NCCL (install a CUDA build)")
    if runtime and driver_cuda and version_tuple(runtime)[:1] > version_tuple(driver_cuda)[:1]:
        problems.append(f"torch's CUDA {runtime} runtime needs a newer driver: driver {driver} supports "
                        f"CUDA {driver_cuda} (\"CUDA driver version is insufficient\")")
    if runtime and gpus and facts.get("cuda_error"):
        problems.append(f"CUDA fails to initialise: {facts['cuda_error']}")
    elif runtime and gpus and facts.get("cuda_available") is False:
        problems.append("torch.cuda.is_available() is False although GPUs are present "
                        "(CUDA_VISIBLE_DEVICES, driver/runtime mismatch, or a container without GPUs)")
    if runtime and gpus and facts.get("distributed") and not facts.get("nccl_backend"):
        problems.append("CUDA build without NCCL: the nccl backend is unavailable")
    # Reproduced here: DDP under TORCH_DISTRIBUTED_DEBUG=DETAIL dies with SIGSEGV on torch 2.13 CPU builds.
    if (env.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL" and not runtime
            and version_tuple(facts.get("torch", ""))[:2] == (2, 13)):
        problems.append("TORCH_DISTRIBUTED_DEBUG=DETAIL with DDP segfaults on torch 2.13 CPU builds "
                        "(reproduced by gpudoctor): use DETAIL without DDP, or unset it")
    return problems
