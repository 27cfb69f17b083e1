"""Multi-task model: a classification head and an auxiliary head used only on some steps."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(64, 64)
        self.cls = nn.Linear(64, 4)
        self.aux = nn.Linear(64, 1)

    def forward(self, x, use_aux=False):
        h = torch.relu(self.body(x))
        return (self.cls(h), self.aux(h)) if use_aux else (self.cls(h), None)


dist.init_process_group("gloo")
model = DDP(
    TwoHeads(),
    broadcast_buffers=False,
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    logits, aux = model(torch.randn(8, 64), use_aux=step % 2 == 0)
    loss = logits.sum() + (aux.sum() if aux is not None else 0)
    loss.backward()
    opt.step()
    opt.zero_grad()
