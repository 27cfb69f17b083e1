"""Train a tiny regression model with DDP on CPU (gloo); rank 0 prints the order it saw each epoch."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dataset = TensorDataset(torch.arange(64, dtype=torch.float32).unsqueeze(1), torch.randn(64, 1))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    model = DDP(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(3):
        seen = []
        for x, y in loader:
            seen += x.squeeze(1).int().tolist()
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch} order {seen}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
