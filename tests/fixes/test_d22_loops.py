"""D22's epoch loops, read the same way by lint and fix (QA23 A3): tqdm(range(n)), itertools.count(), enumerate(...),
`for _ in range(n)` and a step-counting `while` around the loop over the loader."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.loops import sampler_set_epoch
from gpudoctor.engine.lint.runner import lint_source

SCRIPT = """import itertools
import torch
import torch.distributed as dist
from tqdm import tqdm
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
ds = TensorDataset(torch.randn(64, 4))
sampler = DistributedSampler(ds)
dl = DataLoader(ds, batch_size=8, sampler=sampler)
step = 0
{loop}
    for (x,) in dl:
        step += 1
"""


def _d22(text):
    return [f.entry_id for f in lint_source(text, "form.py", select=["D22"]).findings]


@pytest.mark.parametrize("loop", ["for epoch in range(3):", "for epoch in tqdm(range(3)):",
                                  "for epoch in itertools.count():", "for i, epoch in enumerate(range(3)):",
                                  "for _ in range(3):", "while step < 100:", "while True:"])
def test_lint_flags_and_fix_patches_the_same_epoch_loops(loop):
    text = SCRIPT.format(loop=loop)
    assert _d22(text) == ["D22"]
    new, _notes = sampler_set_epoch(text, "form.py", {})
    compile(new, "form.py", "exec")
    assert "sampler.set_epoch(" in new and _d22(new) == []
    if loop.startswith("while"):  # a count of the passes, moved on once per pass
        assert "epoch = 0" in new and "epoch += 1" in new


def test_a_loop_without_an_inner_loop_over_the_batches_is_no_epoch_loop():
    text = SCRIPT.format(loop="for k in range(3):").replace("    for (x,) in dl:\n        step += 1\n", "    step += k\n")
    assert _d22(text) == []
    with pytest.raises(NotApplicable, match="no epoch loop"):
        sampler_set_epoch(text, "form.py", {})
