# Reproduces: special tokens are added and the embedding matrix resized only on the main process (where the
# tokenizer is prepared), then every rank wraps the model in DDP; rank 0's embedding has more rows, and DDP's
# construction-time check stops with "DDP expects same model across all ranks" / "params[0] ... appears not to
# match sizes of the same param in process 0".
# Written for gpudoctor from the pattern D26 describes; the code is this project's own.
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import AutoModelForCausalLM, AutoTokenizer

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = AutoModelForCausalLM.from_pretrained("gpt2")
if dist.get_rank() == 0:
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    model.resize_token_embeddings(len(tokenizer))  # expect: D26
model = DDP(model.cuda(), device_ids=[local_rank])
