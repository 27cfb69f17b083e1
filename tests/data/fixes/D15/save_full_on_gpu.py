"""Save an FSDP model as one file (a test twin for gpudoctor's D15 fix)."""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import StateDictType


def save_checkpoint(model, path):
    # gather the whole model, then write it from rank 0
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
        state = model.state_dict()
    if dist.get_rank() == 0:
        torch.save(state, path)
    dist.barrier()
