"""P3's patch: a DistributedSampler for each DataLoader of a DDP script, its shuffle moved over, set_epoch added."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.data import distributed_sampler

HEAD = "from torch.utils.data import DataLoader\nmodel = DDP(Net())\n"
IMPORT = "from torch.utils.data.distributed import DistributedSampler\n"


@pytest.mark.parametrize("loader, expected", [
    ("loader = DataLoader(ds, batch_size=8, shuffle=True)\n",
     "sampler = DistributedSampler(ds, shuffle=True)\nloader = DataLoader(ds, batch_size=8, sampler=sampler)\n"),
    ("loader = DataLoader(ds, shuffle=True, batch_size=8)\n",  # sampler= where shuffle= stood
     "sampler = DistributedSampler(ds, shuffle=True)\nloader = DataLoader(ds, sampler=sampler, batch_size=8)\n"),
    ("val_loader = DataLoader(dataset=self.val, batch_size=8)\n",  # no shuffle: the order stays as it was
     "val_sampler = DistributedSampler(self.val, shuffle=False)\n"
     "val_loader = DataLoader(dataset=self.val, batch_size=8, sampler=val_sampler)\n"),
    ("dl = DataLoader(\n    ds,\n    shuffle=flag,\n)\n",
     "dl_sampler = DistributedSampler(ds, shuffle=flag)\ndl = DataLoader(\n    ds,\n    sampler=dl_sampler,\n)\n"),
])
def test_each_loader_gets_its_own_sampler_with_the_loaders_shuffle(loader, expected):
    new, notes = distributed_sampler(HEAD + loader, "train.py", {})
    assert new == "from torch.utils.data import DataLoader\n" + IMPORT + "model = DDP(Net())\n" + expected
    assert "1/N of the data" in notes[0] and "set_epoch" in notes[-1]


def test_the_epoch_loop_gets_set_epoch_in_the_same_edit():
    source = HEAD + "loader = DataLoader(ds, shuffle=True)\nfor epoch in range(3):\n    for b in loader:\n" \
                    "        model(b).sum().backward()\n"
    new, _ = distributed_sampler(source, "train.py", {})
    assert "for epoch in range(3):\n    sampler.set_epoch(epoch)\n" in new


@pytest.mark.parametrize("source", [
    "loader = DataLoader(ds, shuffle=True)\n",  # not a DDP script
    HEAD + "s = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=s)\n",  # split already
    HEAD + "loader = DataLoader(make_ds(), shuffle=True)\n",  # the dataset is a call: read twice it would differ
    HEAD + "if rank == 0:\n    loader = DataLoader(ds)\n",  # rank 0's own loader
    HEAD + "loader = accelerator.prepare(DataLoader(ds))\n",  # not `loader = DataLoader(...)`
])
def test_split_data_rank0_loaders_and_unreadable_datasets_are_left_alone(source):
    with pytest.raises(NotApplicable):
        distributed_sampler(source, "train.py", {})
