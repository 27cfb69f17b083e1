"""Real failures for the diagnosis to read: one script, run under torchrun on a GPU machine, that makes one
known mistake per scenario so that torch, NCCL and CUDA print their own messages (bench/gpu/run.sh).

  all-on-gpu0      every rank calls set_device(0): NCCL refuses the duplicate GPU (D3)
  global-ordinal   each rank picks cuda:RANK on a node with fewer GPUs than ranks (D27)
  bad-ifname       NCCL_SOCKET_IFNAME names no interface on this host (MN2)
  stuck-kernel     a kernel that outlasts the process group's timeout: the NCCL watchdog fires (MN3)
  late-peer        rank 1 never reaches init_process_group: rank 0 waits for it (MN3/D20 territory)
  crash-then-wait  rank 1 raises before it touches the GPU, rank 0 waits for it in NCCL's set-up (D20)
  clean            nothing wrong: NCCL's INFO chatter alone, which must get no confident match
  oom              one rank asks for more memory than the GPU has: a plain OOM, no distributed cause
"""
from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def main(scenario: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = datetime.timedelta(seconds=float(os.environ.get("SCENARIO_PG_TIMEOUT", "20")))
    if scenario == "crash-then-wait" and rank == 1:
        raise RuntimeError("scenario: rank 1 failed while loading its data shard")
    if scenario == "all-on-gpu0":
        torch.cuda.set_device(0)
    elif scenario == "global-ordinal":
        torch.cuda.set_device(rank)
    elif scenario == "late-peer" and rank == 1:
        time.sleep(3600)  # never joins; torchrun's outer timeout ends it
    else:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", torch.cuda.current_device()))
    x = torch.ones(1 << 20, device="cuda")
    if scenario == "stuck-kernel":
        # about 60 s of GPU time at ~2 GHz, queued ahead of the collective on the same stream
        torch.cuda._sleep(120_000_000_000)
    if scenario == "oom":
        torch.empty(1 << 40, dtype=torch.float32, device="cuda")  # 4 TiB
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"rank {rank}: all_reduce gave {x[0].item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
