"""P3 per DataLoader, the same in lint and fix (QA23 A2): an import left over splits nothing, and beside a loader with
its own sampler, a shuffling loader without one is still every rank's whole dataset."""
from __future__ import annotations

import re

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.data import distributed_sampler
from gpudoctor.engine.lint.runner import lint_source

HEAD = """import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(4, 1))
ds = TensorDataset(torch.randn(64, 4))
vds = TensorDataset(torch.randn(16, 4))
"""


def _p3_lines(text):
    return [f.line for f in lint_source(text, "train.py", select=["P3"]).findings]


def test_a_sampler_only_imported_splits_nothing():
    text = HEAD + "loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
    assert _p3_lines(text) == [10]
    new, _notes = distributed_sampler(text, "train.py", {})
    assert "sampler = DistributedSampler(ds, shuffle=True)" in new and "DataLoader(ds, batch_size=8, sampler=sampler)" in new


def test_the_training_loader_is_found_beside_a_sampled_validation_loader():
    text = HEAD + ("loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
                   "val_loader = DataLoader(vds, batch_size=8, sampler=DistributedSampler(vds, shuffle=False))\n")
    assert _p3_lines(text) == [10]
    new, _notes = distributed_sampler(text, "train.py", {})
    assert re.search(r"DataLoader\(ds, batch_size=8, sampler=sampler\d*\)", new)
    assert new.count("DistributedSampler(") == 2  # the new one and the validation loader's own
    compile(new, "train.py", "exec")


def test_an_unshuffled_evaluation_loader_beside_a_sampled_training_loader_is_left_alone():
    text = HEAD + ("loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))\n"
                   "val_loader = DataLoader(vds, batch_size=8)\n")
    assert _p3_lines(text) == []
    with pytest.raises(NotApplicable, match="only a shuffling loader"):
        distributed_sampler(text, "train.py", {})
