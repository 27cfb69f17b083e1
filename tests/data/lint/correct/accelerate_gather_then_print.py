# Correct: every process gathers, the main process only prints and saves; wait_for_everyone outside.
import torch
from accelerate import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(4, 2)
model = accelerator.prepare(model)
preds = model(torch.randn(8, 4, device=accelerator.device)).argmax(-1)
all_preds = accelerator.gather_for_metrics(preds)
state = accelerator.get_state_dict(model)
if accelerator.is_main_process:
    print(all_preds.shape)
    accelerator.save(state, "model.pt")
accelerator.wait_for_everyone()
accelerator.save_state("output")
