"""Shard a causal LM with FSDP (a test twin for gpudoctor's D12 fix)."""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from transformers import AutoModelForCausalLM


def build():
    local_rank = int(os.environ["LOCAL_RANK"])
    model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", torch_dtype=torch.bfloat16)
    return FSDP(
        model,
        device_id=local_rank,
        use_orig_params=True,
    )


if __name__ == "__main__":
    dist.init_process_group("nccl")
    build()
