from torch.utils.data import DataLoader, DistributedSampler


def build_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset), drop_last=True)


def train(model, optimizer, loader, epochs):
    for _ in range(epochs):
        for inputs, targets in loader:
            loss = model(inputs, targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
