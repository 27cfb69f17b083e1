"""Rank 1 skips an all_reduce so rank 0's gloo collective times out (run under torchrun, 2 procs)."""
import datetime
import os
import time

import torch
import torch.distributed as dist

TIMEOUT_S = float(os.environ.get("GEN_TIMEOUT_S", "2"))

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
rank = dist.get_rank()
t = torch.ones(1024)
dist.all_reduce(t)  # both ranks: succeeds
print(f"[gen] rank {rank} first all_reduce ok", flush=True)
if rank == 0:
    dist.all_reduce(t)  # rank 1 never joins: times out after TIMEOUT_S
elif os.environ.get("GEN_MODE") == "exit":
    os._exit(0)  # rank 1 vanishes: rank 0 sees its peer's socket close
else:
    time.sleep(TIMEOUT_S * 3)
dist.destroy_process_group()
