# Reproduces: the device chosen from the global rank; on the second node RANK is >= the number of
# local GPUs and set_device fails with "invalid device ordinal".
# Provenance: https://github.com/meta-llama/llama-cookbook/issues/90
import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)  # expect: D3
    model = torch.nn.Linear(8, 8).cuda()
    print(local_rank, rank, next(model.parameters()).device)


if __name__ == "__main__":
    main()
