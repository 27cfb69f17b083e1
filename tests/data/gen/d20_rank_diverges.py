"""D20 worker: one rank fails mid-training (NaN check, simulated CUDA OOM, bad sample, OOM-skip).

--fail nan      : the bad rank's loss becomes NaN at --at-step and a guard raises RuntimeError
--fail oom      : the bad rank raises torch.OutOfMemoryError with a CUDA-style message (simulated on CPU)
--fail data     : the bad rank hits a corrupt record and raises ValueError
--fail oom-skip : the bad rank catches the (simulated) OOM and skips the step, like many trainers do
--fail prefetch : the bad rank's background prefetch thread dies on a corrupt record; its main
                  thread then blocks forever waiting for the next batch
"""
import argparse
import datetime
import math
import queue
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record

p = argparse.ArgumentParser()
p.add_argument("--fail", default="nan")
p.add_argument("--bad-rank", type=int, default=1)
p.add_argument("--at-step", type=int, default=7)
p.add_argument("--timeout", type=float, default=3)
p.add_argument("--steps", type=int, default=15)
args = p.parse_args()


def fake_cuda_oom(rank):
    raise torch.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate 2.00 GiB. GPU {rank} has a total capacity of 79.14 GiB "
        "of which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.92 GiB memory in use. "
        "Of the allocated memory 74.10 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


@record
def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = queue.Queue(maxsize=2)

    def prefetch():
        for i in range(args.steps):
            if args.fail == "prefetch" and rank == args.bad_rank and i == args.at_step:
                raise ValueError(f"corrupt record in shard train-{rank:05d}.tar: unexpected end of gzip stream")
            batches.put(torch.randn(16, 32))

    threading.Thread(target=prefetch, name="prefetch", daemon=True).start()
    for step in range(args.steps):
        x = batches.get()
        bad = rank == args.bad_rank and step == args.at_step
        if bad and args.fail == "data":
            raise ValueError(f"corrupt record in shard train-{rank:05d}.tar at offset 18874368: "
                             "expected 3x224x224 image, got 0 bytes")
        try:
            if bad and args.fail in ("oom", "oom-skip"):
                fake_cuda_oom(rank)
            out = model(x)
            loss = out.pow(2).mean()
            if bad and args.fail == "nan":
                loss = loss * float("nan")
            if not math.isfinite(loss.item()):
                raise RuntimeError(f"Loss is {loss.item()}, stopping training (rank {rank}, step {step})")
            opt.zero_grad()
            loss.backward()
            opt.step()
        except torch.OutOfMemoryError as e:
            if args.fail != "oom-skip":
                raise
            print(f"| WARNING: rank {rank} ran out of memory at step {step}, skipping batch: {str(e)[:60]}...",
                  flush=True)
            opt.zero_grad()
            continue
        print(f"rank {rank} | step {step:3d} | loss {loss.item():.5f}", flush=True)
        time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
