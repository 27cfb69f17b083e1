"""Fine-tune a causal LM with DDP: every rank (8 per node) loads the full model on the CPU before moving it."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

NAME = "meta-llama/Llama-2-7b-hf"


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    config = AutoConfig.from_pretrained(NAME)
    tokenizer = AutoTokenizer.from_pretrained(NAME)
    model = AutoModelForCausalLM.from_pretrained(NAME, config=config, torch_dtype=torch.bfloat16)
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    batch = tokenizer(["hello world"], return_tensors="pt").to(local_rank)
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()


if __name__ == "__main__":
    main()
