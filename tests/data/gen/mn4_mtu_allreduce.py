"""MN4 worker: two "nodes" (network namespaces) whose interfaces use MTU 9000 while the bridge between
them is at 1500. Rendezvous and small all_reduces work; the first large gradient all_reduce stalls."""
import datetime
import os
import socket
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
print(f"[{socket.gethostname()} rank {rank}] iface={os.environ.get('GLOO_SOCKET_IFNAME')} "
      f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "15"))))
print(f"[rank {rank}] process group ready, world_size={dist.get_world_size()}", flush=True)
for numel in [1, 256, 4096, 65536, 1 << 20, 1 << 22]:
    t = torch.ones(numel)
    t0 = time.time()
    dist.all_reduce(t)
    print(f"[rank {rank}] all_reduce {numel * 4:>9d} bytes ok in {time.time() - t0:.3f}s "
          f"(value {t[0].item():.0f})", flush=True)
print(f"[rank {rank}] done", flush=True)
dist.destroy_process_group()
