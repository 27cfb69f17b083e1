# Reproduces: a full FSDP state_dict taken on rank 0 only; gathering the full state dict is a
# collective over all ranks, so rank 0 waits forever.
# Provenance: https://github.com/pytorch/pytorch/issues/122903
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    rank = dist.get_rank()
    fsdp_model = FSDP(torch.nn.Transformer(d_model=256), device_id=local_rank)
    cfg = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(fsdp_model, StateDictType.FULL_STATE_DICT, cfg):
        if rank == 0:
            state = fsdp_model.state_dict()  # expect: D21
            torch.save(state, "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
