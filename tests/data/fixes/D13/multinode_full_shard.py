"""Two nodes of 8 GPUs, FSDP left at FULL_SHARD: every parameter gather crosses the link between the nodes."""
import functools
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
from transformers import AutoModelForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf")
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer})
    model = FSDP(
        model,
        auto_wrap_policy=policy,
        device_id=local_rank,
        use_orig_params=True,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for step in range(100):
        loss = model(input_ids=torch.randint(0, 32000, (4, 512), device="cuda")).logits.float().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
