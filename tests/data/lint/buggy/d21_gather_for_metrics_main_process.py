# Reproduces: accelerator.gather_for_metrics() called under accelerator.is_main_process; the gather
# needs every process, so evaluation hangs.
# Provenance: https://github.com/huggingface/accelerate/issues/2785
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(gradient_accumulation_steps=2)
model = torch.nn.Linear(10, 2)
optimizer = torch.optim.AdamW(model.parameters())
data = TensorDataset(torch.randn(256, 10), torch.randint(0, 2, (256,)))
train_loader = DataLoader(data, batch_size=16, shuffle=True)
test_loader = DataLoader(data, batch_size=16)
model, optimizer, train_loader, test_loader = accelerator.prepare(model, optimizer, train_loader, test_loader)

for epoch in range(3):
    model.train()
    for x, y in train_loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    model.eval()
    correct = 0
    for x, y in test_loader:
        with torch.no_grad():
            pred = model(x).argmax(-1)
        if accelerator.is_main_process:
            pred, y = accelerator.gather_for_metrics((pred, y))  # expect: D21
            correct += (pred == y).sum().item()
    accelerator.print(epoch, correct)
