"""D23 helper: --save writes a large checkpoint (the caller kills it mid-write); --resume loads it."""
import sys
import time

import torch
import torch.nn as nn

path = sys.argv[2]
if sys.argv[1] == "--save":
    model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(24)])
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 2048)).sum().backward()
    opt.step()
    print(f"epoch 7 finished, saving checkpoint to {path} ...", flush=True)
    t0 = time.time()
    torch.save({"epoch": 7, "model": model.state_dict(), "optimizer": opt.state_dict()}, path)
    print(f"saved in {time.time() - t0:.1f}s", flush=True)
else:
    print(f"=> resuming from checkpoint '{path}'", flush=True)
    ckpt = torch.load(path, map_location="cpu")
    print(f"=> loaded checkpoint (epoch {ckpt['epoch']})")
