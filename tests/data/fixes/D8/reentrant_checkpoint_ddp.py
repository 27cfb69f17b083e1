# DDP with find_unused_parameters=True around a model whose blocks use reentrant activation checkpointing: backward
# re-runs each checkpointed block and DDP sees the block's parameters ready twice ("Expected to mark a variable ready
# only once"). The fix makes the checkpointing non-reentrant.
import torch
import torch.utils.checkpoint as cp
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import AutoModelForCausalLM


class Tower(torch.nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = torch.nn.ModuleList(blocks)

    def forward(self, x):
        for block in self.blocks:
            x = cp.checkpoint(block, x)
        return x


lm = AutoModelForCausalLM.from_pretrained("gpt2")
lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"preserve_rng_state": True})
model = DDP(Tower([torch.nn.Linear(64, 64) for _ in range(4)]).cuda(), find_unused_parameters=True)
