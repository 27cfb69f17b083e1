import os

import torch
import torch.distributed as dist


def setup():
    dist.init_process_group(
        backend="nccl",
        init_method="env://",
    )
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


setup()
