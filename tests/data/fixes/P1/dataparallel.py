import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
# use all the GPUs of the machine
model = nn.DataParallel(model).cuda()
optimizer = torch.optim.Adam(model.parameters())
for step in range(1000):
    x = torch.randn(256, 512).cuda()
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
