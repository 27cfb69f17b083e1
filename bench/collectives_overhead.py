"""Collectives probe vs a bare torch.distributed all_reduce loop over the same sizes, measured in one run.

Two comparisons, both on gloo ranks forked after torch is imported, with the sizes, warm-up and iteration
counts taken from gpudoctor.probes.sweep:
  end to end   `gpudoctor probe collectives` (CLI, runner child, checks, straggler barrier, gather) against a
               fresh Python that imports torch, forks the ranks and runs the bare loop; runs alternate so
               load drifts hit both alike
  in the group the probe's timed sweep against the bare loop, alternating inside one process group
The budget: the probe adds at most 10% over the bare loop.

    python bench/collectives_overhead.py [--runs 7] [--nproc 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

BUDGET = 1.10


def bare_loop(dist, torch, sizes: list[int]) -> None:
    from gpudoctor.probes.sweep import WARMUP, iterations

    for size in sizes:
        buffer = torch.zeros(max(1, size // 4))
        for _ in range(WARMUP + iterations(size, gpu=False)):
            dist.all_reduce(buffer)


def bare_rank(rank: int, world: int, path: str, sizes: list[int], rounds: int, conn) -> None:
    import torch
    import torch.distributed as dist

    from gpudoctor.probes import collectives

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(path, world), rank=rank, world_size=world)
    bare_s, probe_s = [], []
    runs = {
        "bare": (bare_s, lambda: bare_loop(dist, torch, sizes)),
        "probe": (probe_s, lambda: collectives._sweep(torch, dist, torch.device("cpu"), lambda: None, sizes, False)),
    }
    for round_number in range(rounds):
        # alternate which goes first, so whatever the first run of a round pays, both pay equally
        for name in (("bare", "probe") if round_number % 2 == 0 else ("probe", "bare")):
            times, work = runs[name]
            dist.barrier()
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
    if conn is not None:
        conn.send((bare_s, probe_s))
    dist.destroy_process_group()
    os._exit(0)


def in_group(nproc: int, rounds: int) -> tuple[list[float], list[float]]:
    """Rank 0's timings of the bare loop and the probe's sweep, alternating in one group."""
    import multiprocessing as mp

    import torch.distributed  # noqa: F401  (before the fork, as the probe does)

    from gpudoctor.probes.collectives import CPU_MAX_BYTES
    from gpudoctor.probes.sweep import message_sizes

    sizes = message_sizes(CPU_MAX_BYTES, gpu=False)
    ctx = mp.get_context("fork")
    reader, writer = ctx.Pipe(duplex=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "store")
        procs = [ctx.Process(target=bare_rank, args=(r, nproc, path, sizes, rounds, writer if r == 0 else None))
                 for r in range(nproc)]
        for proc in procs:
            proc.start()
        result = reader.recv()
        for proc in procs:
            proc.join()
    return result


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def report(label: str, probe: list[float], bare: list[float]) -> float:
    ratio_min = min(probe) / min(bare)
    ratio_median = statistics.median(probe) / statistics.median(bare)
    print(f"{label}")
    print(f"  bare loop   min {min(bare):7.3f} s  median {statistics.median(bare):7.3f} s")
    print(f"  probe       min {min(probe):7.3f} s  median {statistics.median(probe):7.3f} s")
    print(f"  ratio probe/bare: {ratio_min:.3f} (min)  {ratio_median:.3f} (median)")
    return ratio_min


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        in_group_ranks = args.nproc
        import multiprocessing as mp

        import torch.distributed  # noqa: F401

        from gpudoctor.probes.collectives import CPU_MAX_BYTES
        from gpudoctor.probes.sweep import message_sizes

        sizes = message_sizes(CPU_MAX_BYTES, gpu=False)
        ctx = mp.get_context("fork")
        with tempfile.TemporaryDirectory() as tmp:
            procs = [ctx.Process(target=_bare_only, args=(r, in_group_ranks, os.path.join(tmp, "store"), sizes))
                     for r in range(in_group_ranks)]
            for proc in procs:
                proc.start()
            for proc in procs:
                proc.join()
        os._exit(0)  # as the probe's child does: interpreter teardown with torch loaded is not the loop's cost
    probe_cmd = [sys.executable, "-m", "gpudoctor", "probe", "collectives", "--nproc", str(args.nproc), "--json"]
    bare_cmd = [sys.executable, __file__, "--bare", "--nproc", str(args.nproc)]
    timed(bare_cmd)  # warm the page cache for torch's libraries before anything counts
    probe_times, bare_times = [], []
    for _ in range(args.runs):
        bare_times.append(timed(bare_cmd))
        probe_times.append(timed(probe_cmd))
    print(f"collectives probe vs bare all_reduce loop, {args.nproc} gloo ranks, {args.runs} runs each")
    end_to_end = report("end to end (fresh process, torch import, fork, group, sweep):", probe_times, bare_times)
    bare_s, probe_s = in_group(args.nproc, args.runs)
    sweep_ratio = report("in the group (the timed sweep alone):", probe_s, bare_s)
    ok = end_to_end <= BUDGET and sweep_ratio <= BUDGET
    print(f"budget {BUDGET:.2f}: {'ok' if ok else 'OVER'}")
    return 0 if ok else 1


def _bare_only(rank: int, world: int, path: str, sizes: list[int]) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(path, world), rank=rank, world_size=world)
    bare_loop(dist, torch, sizes)
    dist.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
