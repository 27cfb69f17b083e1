# Reproduces: a shuffling DistributedSampler that is never told the epoch; every epoch yields the
# same order.
# Provenance: https://github.com/pytorch/pytorch/issues/31771
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Numbers(Dataset):
    def __len__(self):
        return 22

    def __getitem__(self, idx):
        return idx


torch.distributed.init_process_group(backend="gloo")
dataset = Numbers()
sampler = DistributedSampler(dataset, shuffle=True)  # expect: D22
loader = DataLoader(dataset, batch_size=5, drop_last=True, sampler=sampler)
for epoch in range(3):
    for batch in loader:
        print(epoch, batch.tolist())
