# Reproduces: a deep CNN wrapped in nn.DataParallel across four GPUs trains no faster than on one:
# one process replicates the model and gathers outputs on GPU 0 every step.
# Provenance: https://github.com/pytorch/pytorch/issues/3917
import torch
import torch.nn as nn
import torchvision

net = torchvision.models.resnet152(num_classes=10)
net = torch.nn.DataParallel(net).cuda()  # expect: P1
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
criterion = nn.CrossEntropyLoss()
for step in range(100):
    images = torch.randn(128, 3, 32, 32).cuda(non_blocking=True)
    labels = torch.randint(0, 10, (128,)).cuda(non_blocking=True)
    loss = criterion(net(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
