"""Collectives (D19, D20, MN2-MN4): all_reduce correctness, a size sweep with nccl-tests' busbw, a straggler barrier."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from typing import Mapping

from gpudoctor.probes import hostinfo, linkspeed, ranks
from gpudoctor.probes.sweep import WARMUP, analyse, human_bytes, iterations, message_sizes
from gpudoctor.probes.base import Result, confirmed, ruled_out, skipped

CPU_MAX_BYTES = 4 << 20
GPU_MAX_BYTES = 256 << 20
COLLECTIVE_TIMEOUT_S = 30.0


def rank_main(rank: int, world: int, plan: dict) -> dict:
    """One rank: form the group, check, sweep, time a barrier, post its figures; rank 0 gathers everyone's."""
    import torch
    import torch.distributed as dist

    stats = {"rank": rank, "host": hostinfo.hostname(), "pid": os.getpid(), "local_rank": plan.get("local_rank", rank)}
    gpu = plan["backend"] == "nccl"
    if not gpu and plan.get("single_thread"):
        torch.set_num_threads(1)  # as torchrun's OMP_NUM_THREADS=1: ranks must not fight over the cores
    store = _open_store(plan, world)
    stage = "init"
    try:
        start = time.perf_counter()
        device = torch.device("cpu")
        if gpu:
            device = torch.device("cuda", stats["local_rank"])
            torch.cuda.set_device(device)
        dist.init_process_group(plan["backend"], store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=plan["timeout_s"]))
        stats["init_s"] = time.perf_counter() - start
        sync = torch.cuda.synchronize if gpu else (lambda: None)
        stage = "correctness"
        stats.update(_correctness(torch, dist, device, rank, world))
        stage = "sweep"
        stats["sweep"], failure = _sweep(torch, dist, device, sync, plan["sizes"], gpu)
        if failure:
            stats["failed_at"], stats["error"] = failure
        else:
            stage = "barrier"
            delay = plan.get("delay_s", 0.0) if rank == plan.get("delay_rank") else 0.0
            stats.update(_straggler(torch, dist, device, sync, gpu, delay_s=delay))
    except Exception as exc:  # a failing collective is the finding; report it instead of dying
        stats["error"] = f"{stage}: {type(exc).__name__}: {exc}".splitlines()[0][:300]
        stats["stage"] = stage
    ranks.post_json(store, f"stats/{rank}", stats)
    gathered = None
    if rank == 0:
        keys = [f"stats/{r}" for r in range(world)]
        found, _ = ranks.collect_json(store, keys, plan["gather_timeout_s"])
        gathered = [found.get(k) for k in keys]
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    return {"self": stats, "ranks": gathered}


def _open_store(plan: dict, world: int):
    import torch.distributed as dist

    spec = plan["store"]
    if spec["kind"] == "file":
        return dist.FileStore(spec["path"], world)
    job = hostinfo.Job(0, world, 0, 0, spec["master_addr"], spec["master_port"], True, True, 0)
    return ranks.connect_job_store(job, spec["prefix"], plan["timeout_s"])


def _correctness(torch, dist, device, rank: int, world: int) -> dict:
    """Rank-dependent integers (exact in float32): any dropped, doubled or misrouted chunk shows."""
    n = 4096
    pattern = torch.arange(n, device=device, dtype=torch.float32) % 7
    data = pattern + (rank + 1)
    dist.all_reduce(data)
    expected = pattern * world + world * (world + 1) / 2
    ids = [torch.zeros(1, device=device, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(ids, torch.tensor([rank], device=device, dtype=torch.int64))
    return {"correct": bool(torch.equal(data, expected)), "ranks_seen": [int(t.item()) for t in ids]}


def _sweep(torch, dist, device, sync, sizes: list[int], gpu: bool):
    """Per size, nccl-tests style: warm up, then time the loop as a whole and divide."""
    rows = []
    for size in sizes:
        buffer = torch.zeros(max(1, size // 4), device=device, dtype=torch.float32)  # zeros never overflow
        try:
            for _ in range(WARMUP):
                dist.all_reduce(buffer)
            sync()
            count = iterations(size, gpu)
            start = time.perf_counter()
            for _ in range(count):
                dist.all_reduce(buffer)
            sync()
            rows.append([size, (time.perf_counter() - start) / count])
        except Exception as exc:
            return rows, (size, f"sweep at {human_bytes(size)}: {type(exc).__name__}: {exc}".splitlines()[0][:300])
    return rows, None


def _straggler(torch, dist, device, sync, gpu: bool, rounds: int = 3, delay_s: float = 0.0) -> dict:
    """The same local work on every rank, then a timed barrier: the late rank waits least, the others wait for it.

    The fastest of several rounds is kept, so a moment of preemption on a busy host does not name a straggler;
    a rank that is slow every round (a throttled GPU, a shared core) still stands out.
    """
    dim, reps = (4096, 5) if gpu else (128, 10)
    a = torch.randn(dim, dim, device=device)
    computes, waits = [], []
    for _ in range(rounds):
        dist.barrier()
        sync()
        start = time.perf_counter()
        b = a
        for _ in range(reps):
            b = torch.tanh(b @ a)
        if delay_s:  # options delay_rank/delay_s make one rank late on purpose, to see it named
            time.sleep(delay_s)
        sync()
        computes.append(time.perf_counter() - start)
        start = time.perf_counter()
        dist.barrier()
        sync()
        waits.append(time.perf_counter() - start)
    return {"compute_s": min(computes), "barrier_wait_s": sorted(waits)[len(waits) // 2]}


def probe(options: Mapping) -> Result:
    env = hostinfo.environ(options)
    job = hostinfo.job_from_env(env)
    if job is not None and options.get("store_prefix"):
        return _under_launcher(options, env, job)
    return _local(options, env)


def _plan(options: Mapping, backend: str, gpu: bool) -> dict:
    max_bytes = int(options.get("max_bytes") or (GPU_MAX_BYTES if gpu else CPU_MAX_BYTES))
    timeout = float(options.get("collective_timeout_s") or COLLECTIVE_TIMEOUT_S)
    return {"backend": backend, "sizes": message_sizes(max_bytes, gpu), "timeout_s": timeout,
            "gather_timeout_s": timeout + 5, "delay_rank": options.get("delay_rank"),
            "delay_s": float(options.get("delay_s") or 0.0)}


def pick_backend(wanted: str | None, gpus: int, nccl: bool, ranks_here: int) -> tuple[str, str | None]:
    """(backend, why not) for `ranks_here` ranks on a node with `gpus` GPUs: nccl when each rank can have a
    GPU of its own, gloo otherwise. Every rank of a node computes the same answer from the same figures, so
    no rank is left waiting in a group that another rank declined to join."""
    if wanted == "nccl" and not nccl:
        return "", "backend nccl asked for, but NCCL or GPUs are unavailable here"
    if wanted == "nccl" and ranks_here > gpus:
        return "", (f"{ranks_here} ranks on this node need {ranks_here} GPUs with nccl; {gpus} visible "
                    "(use --backend gloo)")
    if wanted:
        return wanted, None
    return ("nccl" if nccl and ranks_here <= gpus else "gloo"), None


def _gpus() -> tuple[int, bool]:
    """(visible GPUs, whether NCCL is usable with them)."""
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.version.cuda and torch.cuda.is_available() else 0
    return gpus, bool(gpus and dist.is_nccl_available())


def _more_ranks_than_gpus(ranks_here: int, gpus: int) -> str:
    return (f"{ranks_here} ranks on this node but {gpus} GPU(s) visible: the collectives ran on gloo; an NCCL "
            "job launched this way fails with \"invalid device ordinal\" or a duplicate GPU (D27)")


def _local(options: Mapping, env: Mapping[str, str]) -> Result:
    import torch.distributed as dist

    if not dist.is_available():
        return skipped("this torch has no torch.distributed")
    gpus, nccl = _gpus()
    wanted = options.get("backend")
    world = int(options.get("nproc") or (gpus if gpus >= 2 and wanted != "gloo" else 2))
    backend, why = pick_backend(wanted, gpus, nccl, world)
    if why:
        return skipped(why)
    gpu = backend == "nccl"
    plan = _plan(options, backend, gpu)
    plan["single_thread"] = True
    workdir = tempfile.mkdtemp(prefix="gpudoctor-collectives-")
    plan["store"] = {"kind": "file", "path": os.path.join(workdir, "store")}
    try:
        budget = float(options.get("rank_timeout_s") or plan["timeout_s"] * 3 + 30)
        outcomes = ranks.run_local(world, rank_main, (plan,), budget, method="spawn" if gpu else "fork")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rank0 = outcomes[0].payload or {}
    gathered = rank0.get("ranks") or [o.payload.get("self") if o.payload else None for o in outcomes]
    deaths = {o.rank: o.died_from or f"exit {o.exitcode}" for o in outcomes
              if o.payload is None}
    link, why_no_link = linkspeed.expected_link(options, env, backend, False, None)
    oversubscribed = not gpu and world > (os.cpu_count() or 1)
    return analyse(gathered, world, backend, deaths, link, why_no_link, oversubscribed, multi_node=False)


def _under_launcher(options: Mapping, env: Mapping[str, str], job: hostinfo.Job) -> Result:
    import torch.distributed as dist

    if not dist.is_available():
        return skipped("this torch has no torch.distributed")
    gpus, nccl = _gpus()
    wanted = options.get("backend")
    backend, why = pick_backend(wanted, gpus, nccl, job.local_world_size)
    if why:  # every rank of the node says so and leaves: none is left waiting for the others
        return confirmed(why + " (D27)", entries=("D27",)) if wanted == "nccl" and nccl else skipped(why)
    gpu = backend == "nccl"
    plan = _plan(options, backend, gpu)
    plan["local_rank"] = job.local_rank
    plan["store"] = {"kind": "job", "prefix": options["store_prefix"], "master_addr": job.master_addr,
                     "master_port": job.master_port}
    out = rank_main(job.rank, job.world_size, plan)
    if job.rank != 0:
        mine = out["self"]
        if mine.get("error"):
            return confirmed(f"rank {job.rank}: {mine['error']}", figures={"self": mine},
                             entries=("MN2",) if job.multi_node else ())
        return ruled_out(f"rank {job.rank} took part; rank 0 reports for the group", figures={"self": mine})
    link, why_no_link = linkspeed.expected_link(options, env, backend, job.multi_node, job.master_addr)
    oversubscribed = not gpu and job.local_world_size > (os.cpu_count() or 1)
    result = analyse(out["ranks"] or [out["self"]], job.world_size, backend, {}, link, why_no_link,
                     oversubscribed, multi_node=job.multi_node)
    if not wanted and 0 < gpus < job.local_world_size:
        result = replace(result, evidence=(_more_ranks_than_gpus(job.local_world_size, gpus), *result.evidence),
                         entries=tuple(dict.fromkeys((*result.entries, "D27"))))
    return result
