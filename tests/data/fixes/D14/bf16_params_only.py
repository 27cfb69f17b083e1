"""FSDP fine-tuning in bf16 (a test twin for gpudoctor's D14 fix)."""
import functools
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy


def wrap(model, block_cls):
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={block_cls})
    bf16 = MixedPrecision(
        param_dtype=torch.bfloat16,
        buffer_dtype=torch.bfloat16,
    )
    return FSDP(model, auto_wrap_policy=policy, mixed_precision=bf16,
                device_id=int(os.environ["LOCAL_RANK"]))


if __name__ == "__main__":
    dist.init_process_group("nccl")
