"""The launch contract (D1, D3, D27; D2 under SLURM): rank variables present and consistent, devices visible, one GPU
per local rank, and under SLURM, consistent with where srun put this process (probes/slurm.py)."""
from __future__ import annotations

import os
from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, entry_ids, inconclusive, ruled_out, skipped
from gpudoctor.probes.slurm import describe, missing_contract, slurm_context, slurm_problems

CONTRACT = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# what init_process_group(env://) reads: without one of these no group forms (D1); LOCAL_RANK and LOCAL_WORLD_SIZE are
# torchrun's for the script's own use (its GPU), and other launchers (mpirun wrappers, DeepSpeed's, a hand-written
# sbatch) may leave them out of a launch that works
REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
GATHER_TIMEOUT_S = 20.0


def probe(options: Mapping) -> Result:
    env = hostinfo.environ(options)
    present = [name for name in CONTRACT if name in env]
    torchrun = "TORCHELASTIC_RUN_ID" in env
    gpus = hostinfo.visible_gpu_count(options)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    evidence = [f"CUDA_VISIBLE_DEVICES={cvd if cvd is not None else '(unset)'}; GPUs visible: {gpus}"]
    figures = {"gpus_visible": gpus, "torchrun": torchrun}
    slurm = slurm_context(env)
    slurm_found: list[tuple[str, str]] = []
    if slurm is not None:
        evidence.append(describe(slurm))
        figures["slurm"] = slurm
        slurm_found = slurm_problems(env, slurm)
    if not present:
        if slurm is None:
            return skipped("not launched (no RANK, WORLD_SIZE): run it under torchrun", evidence, figures)
        evidence += [f"{entry}: {text}" for entry, text in slurm_found]
        if slurm_found and torchrun:
            return confirmed(slurm_found[0][1], evidence, figures, entry_ids(e for e, _ in slurm_found))
        if slurm_found:  # what this process will start is not known yet: a warning, not a finding
            return inconclusive(slurm_found[0][1], evidence, figures, entry_ids(e for e, _ in slurm_found))
        if slurm["in_step"]:
            why = missing_contract(slurm)
            return inconclusive(why, evidence + [f"D1: {why}"], figures, ("D1",))
        return skipped("not launched (no RANK, WORLD_SIZE): run it under torchrun or srun", evidence, figures)
    problems = contract_problems(env, gpus) + slurm_found
    evidence.insert(0, "launched by " + ("torchrun" if torchrun else "a launcher that is not torchrun")
                    + ": " + ", ".join(f"{n}={env[n]}" for n in present))
    unset = [n for n in CONTRACT if n not in REQUIRED and n not in env]
    if unset:  # the group forms without them; a script that reads them (set_device(LOCAL_RANK)) does not start
        them = "them" if len(unset) > 1 else "it"
        evidence.append(f"{', '.join(unset)} unset (torchrun sets {them}; init_process_group does not need {them}, "
                        "but a script that picks its GPU from LOCAL_RANK fails without it)")
    job = hostinfo.job_from_env(env)
    impossible = any(entry == "D1" for entry, _ in problems)  # no group can form: nobody to gather from
    if job is not None and options.get("store_prefix") and job.world_size > 1 and not impossible \
            and hostinfo.torch_installed():
        local = _local_view(job, env, gpus)
        try:
            peers = _gather(job, options["store_prefix"], local)
        except Exception as exc:  # the cross-rank view is a bonus; the local checks stand alone
            evidence.append(f"could not gather the other ranks' view: {type(exc).__name__}: {exc}"[:200])
            peers = None
        if job.rank != 0 or peers is None:
            problems += local["problems"]
        else:
            problems += cross_rank_problems(peers, job.world_size)
            figures["ranks_reporting"] = len([p for p in peers if p])
    elif job is not None:
        problems += _device_problems(job, gpus, env)
    entries = entry_ids(entry for entry, _ in problems)
    evidence += [f"{entry}: {text}" for entry, text in problems]
    if problems:
        return confirmed(problems[0][1], evidence, figures, entries)
    if job is None:
        return inconclusive("launch variables present but not parseable", evidence, figures, ("D1",))
    if figures.get("ranks_reporting"):
        summary = f"contract consistent across {figures['ranks_reporting']} ranks"
    else:
        summary = f"contract complete: rank {job.rank}/{job.world_size}, local {job.local_rank}/{job.local_world_size}"
    # D3 (the GPU from the global rank) only where the local rank is there to pick it by
    return ruled_out(summary, evidence, figures, ("D1",) + (("D3",) if "LOCAL_RANK" in env else ())
                     + (("D27",) if gpus else ()))


def contract_problems(env: Mapping[str, str], gpus: int) -> list[tuple[str, str]]:
    """Missing, unparsable or contradictory rank variables, each tagged with the entry it belongs to."""
    problems: list[tuple[str, str]] = []
    missing = [n for n in REQUIRED if n not in env]
    if missing:
        problems.append(("D1", "missing " + ", ".join(missing) + ": init_process_group(env://) cannot form the group"))
    values: dict[str, int] = {}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
        if name in env:
            try:
                values[name] = int(env[name])
            except ValueError:
                problems.append(("D1", f"{name}={env[name]!r} is not an integer"))
    rank, world = values.get("RANK"), values.get("WORLD_SIZE")
    local_rank, local_world = values.get("LOCAL_RANK"), values.get("LOCAL_WORLD_SIZE")
    if world is not None and world < 1:
        problems.append(("D1", f"WORLD_SIZE={world} must be at least 1"))
    if rank is not None and world is not None and not 0 <= rank < world:
        problems.append(("D1", f"RANK={rank} is outside 0..{world - 1}"))
    if local_rank is not None and local_world is not None and not 0 <= local_rank < local_world:
        problems.append(("D3", f"LOCAL_RANK={local_rank} is outside 0..{local_world - 1}"))
    if local_world is not None and world is not None and local_world > world:
        problems.append(("D1", f"LOCAL_WORLD_SIZE={local_world} exceeds WORLD_SIZE={world}"))
    port = values.get("MASTER_PORT")
    if port is not None and not 0 < port < 65536:
        problems.append(("D1", f"MASTER_PORT={port} is not a valid port"))
    if env.get("MASTER_ADDR", None) == "":
        problems.append(("D1", "MASTER_ADDR is empty"))
    return problems


def _device_problems(job: hostinfo.Job, gpus: int, env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """D27 on this rank: as many GPUs visible as ranks on the node, so LOCAL_RANK names one. Only what the launch
    states: without LOCAL_WORLD_SIZE (or LOCAL_RANK) the job's defaults (the world, the rank) say nothing."""
    problems = []
    if gpus == 0:
        return problems
    stated = env if env is not None else {"LOCAL_WORLD_SIZE": "", "LOCAL_RANK": ""}
    if "LOCAL_WORLD_SIZE" in stated and job.local_world_size > gpus:
        problems.append(("D27", f"LOCAL_WORLD_SIZE={job.local_world_size} ranks but {gpus} GPUs visible: "
                                "ranks would share GPUs or find none"))
    if "LOCAL_RANK" in stated and job.local_rank >= gpus:
        problems.append(("D27", f"LOCAL_RANK={job.local_rank} has no GPU (only {gpus} visible): "
                                "set_device(LOCAL_RANK) fails"))
    return problems


def _local_view(job: hostinfo.Job, env: Mapping[str, str], gpus: int) -> dict:
    view = {"rank": job.rank, "local_rank": job.local_rank, "local_world_size": job.local_world_size,
            "host": hostinfo.hostname(), "gpus": gpus, "cvd": env.get("CUDA_VISIBLE_DEVICES"),
            "device": None, "problems": _device_problems(job, gpus, env)}
    if gpus and job.local_rank < gpus:
        view["device"] = _device_after_set(job.local_rank)
    return view


def _device_after_set(local_rank: int) -> dict | None:
    """Follow the D1 recipe (set_device(LOCAL_RANK)) and report which physical GPU this rank got."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        torch.cuda.set_device(local_rank)
        current = torch.cuda.current_device()
        uuid = str(getattr(torch.cuda.get_device_properties(current), "uuid", ""))
        return {"current": current, "uuid": uuid}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


def _gather(job: hostinfo.Job, prefix: str, local: dict) -> list[dict | None] | None:
    from gpudoctor.probes import ranks

    store = ranks.connect_job_store(job, prefix, GATHER_TIMEOUT_S)
    ranks.post_json(store, f"env/{job.rank}", local)
    if job.rank != 0:
        return None
    keys = [f"env/{r}" for r in range(job.world_size)]
    found, _ = ranks.collect_json(store, keys, GATHER_TIMEOUT_S)
    return [found.get(k) for k in keys]


def cross_rank_problems(views: list[dict | None], world: int) -> list[tuple[str, str]]:
    """What only the ranks together show: missing ranks, two ranks on one GPU, per-host counts that disagree."""
    problems: list[tuple[str, str]] = []
    missing = [r for r, v in enumerate(views) if not v]
    if missing:
        problems.append(("D1", f"ranks {missing} did not report within {GATHER_TIMEOUT_S:g} s"))
    seen_slots, seen_gpus, per_host = {}, {}, {}
    for view in (v for v in views if v):
        for entry, text in view.get("problems", []):
            problems.append((entry, f"rank {view['rank']}: {text}"))
        slot = (view["host"], view["local_rank"])
        if slot in seen_slots:
            problems.append(("D3", f"ranks {seen_slots[slot]} and {view['rank']} both have LOCAL_RANK "
                                   f"{view['local_rank']} on {view['host']}"))
        seen_slots.setdefault(slot, view["rank"])
        per_host.setdefault(view["host"], []).append(view)
        device = view.get("device") or {}
        if device.get("error"):
            problems.append(("D27", f"rank {view['rank']}: set_device({view['local_rank']}) failed: {device['error']}"))
        elif device.get("current") is not None and device["current"] != view["local_rank"]:
            problems.append(("D3", f"rank {view['rank']}: current device {device['current']} != LOCAL_RANK "
                                   f"{view['local_rank']}"))
        if device.get("uuid"):
            key = (view["host"], device["uuid"])
            if key in seen_gpus:
                problems.append(("D3", f"ranks {seen_gpus[key]} and {view['rank']} share one GPU on {view['host']}"))
            seen_gpus.setdefault(key, view["rank"])
    for host, host_views in per_host.items():
        declared = {v["local_world_size"] for v in host_views}
        if len(host_views) not in declared and not missing:
            problems.append(("D1", f"{host}: {len(host_views)} ranks but LOCAL_WORLD_SIZE says {sorted(declared)}"))
    return problems


def is_launched(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return hostinfo.job_from_env(env) is not None
