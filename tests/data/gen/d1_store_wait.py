"""D1 worker: RANK/WORLD_SIZE exported by hand, but only one of the two processes is started."""
import datetime
import os

import torch
import torch.distributed as dist

print(f"starting rank {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')} "
      f"(MASTER_ADDR={os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')})", flush=True)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
print("process group ready", flush=True)
x = torch.ones(4)
dist.all_reduce(x)
print("allreduce ok", x)
