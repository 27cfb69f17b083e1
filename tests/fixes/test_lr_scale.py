"""D11's patch: each optimizer's lr in a DDP script multiplied by the world size (or its square root)."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.lr_scale import lr_scale_world_size

HEAD = ("import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = DDP(net)\n")


@pytest.mark.parametrize("line, expect", [
    ("opt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
     "opt = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())\n"),
    ("opt = AdamW(model.parameters(), cfg.lr)\n", "opt = AdamW(model.parameters(), cfg.lr * dist.get_world_size())\n"),
    ("opt = torch.optim.Adam(model.parameters(), lr=base if warm else 2 * base)\n",
     "opt = torch.optim.Adam(model.parameters(), lr=(base if warm else 2 * base) * dist.get_world_size())\n"),
    ("opt = torch.optim.SGD(model.parameters(), lr=a + b)\n",
     "opt = torch.optim.SGD(model.parameters(), lr=(a + b) * dist.get_world_size())\n"),
])
def test_the_lr_is_multiplied_by_the_world_size(line, expect):
    new, notes = lr_scale_world_size(HEAD + line, "t.py", {})
    assert new == HEAD + expect
    assert "multiplied by the number of processes" in notes[0]


def test_sqrt_rule_adds_the_math_import():
    new, notes = lr_scale_world_size(HEAD + "opt = torch.optim.AdamW(model.parameters(), lr=3e-4)\n", "t.py",
                                     {"lr_scaling": "sqrt"})
    assert "lr=3e-4 * math.sqrt(dist.get_world_size())" in new and "import math\n" in new
    assert "square root" in notes[0]


def test_torch_distributed_without_an_alias_is_imported():
    source = "import torch\nmodel = torch.nn.parallel.DistributedDataParallel(net)\nopt = torch.optim.SGD(p, lr=0.1)\n"
    new, _ = lr_scale_world_size(source, "t.py", {})
    assert "import torch.distributed\n" in new and "lr=0.1 * torch.distributed.get_world_size()" in new


@pytest.mark.parametrize("source, why", [
    (HEAD + "opt = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())\n", "already follow"),
    (HEAD + "opt = torch.optim.SGD(model.parameters(), lr=args.scaled_lr)\n", "already follow"),
    (HEAD + "opt = torch.optim.Adam(model.parameters())\n", "no optimizer with an lr"),
    ("import torch\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\n", "not a DDP script"),
])
def test_left_alone(source, why):
    with pytest.raises(NotApplicable, match=why):
        lr_scale_world_size(source, "t.py", {})


def test_a_bad_rule_is_refused():
    with pytest.raises(NotApplicable, match="linear or sqrt"):
        lr_scale_world_size(HEAD + "opt = torch.optim.SGD(p, lr=0.1)\n", "t.py", {"lr_scaling": "cubic"})
