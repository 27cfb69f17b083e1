# Reproduces: accelerator.save_state() called on the main process only while training with DeepSpeed;
# the save gathers state from every rank and hangs.
# Provenance: https://github.com/bghira/SimpleTuner/issues/262
import torch
from accelerate import Accelerator

accelerator = Accelerator()
unet = torch.nn.Linear(64, 64)
optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-4)
unet, optimizer = accelerator.prepare(unet, optimizer)

global_step = 0
for epoch in range(10):
    for _ in range(100):
        loss = unet(torch.randn(4, 64, device=accelerator.device)).square().mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        global_step += 1
        if global_step % 500 == 0:
            if accelerator.is_main_process:
                accelerator.save_state(f"output/checkpoint-{global_step}")  # expect: D21
