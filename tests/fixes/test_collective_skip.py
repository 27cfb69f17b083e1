"""D20's patch: a step skipped on one rank's NaN/inf check becomes one decision for all ranks."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.skips import collective_skip
from gpudoctor.engine.lint import lint_source

HEAD = "import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"


def test_the_flag_is_all_reduced_before_the_skip():
    loop = ("model = DDP(net)\nfor x, y in loader:\n    loss = crit(model(x), y)\n"
            "    if not math.isfinite(loss.item()):\n        continue\n    loss.backward()\n")
    new, notes = collective_skip(HEAD + loop, "t.py", {})
    assert ("    skip_step = torch.tensor(float(bool(not math.isfinite(loss.item()))), device=loss.device)\n"
            "    dist.all_reduce(skip_step, op=dist.ReduceOp.MAX)  # the same decision on every rank\n"
            "    if skip_step.item() > 0:\n        continue\n") in new
    assert "decided for all ranks" in notes[0]
    assert "D20" not in [f.entry_id for f in lint_source(new, "t.py").findings]
    assert "D20" in [f.entry_id for f in lint_source(HEAD + loop, "t.py").findings]


def test_the_flag_name_avoids_the_scripts_own():
    loop = "model = DDP(net)\nskip_step = 0\nfor x in loader:\n    loss = model(x)\n    if torch.isinf(loss):\n" \
           "        continue\n    loss.backward()\n"
    new, _ = collective_skip(HEAD + loop, "t.py", {})
    assert "skip_this_step = torch.tensor(" in new


@pytest.mark.parametrize("source, why", [
    ("import torch\nfor x in loader:\n    loss = model(x)\n    if torch.isnan(loss):\n        continue\n"
     "    loss.backward()\n", "not a DDP"),
    (HEAD + "model = DDP(net)\nfor x in loader:\n    loss = model(x)\n    loss.backward()\n    if torch.isnan(loss):\n"
            "        print('nan')\n", "no step skipped"),
])
def test_left_alone(source, why):
    with pytest.raises(NotApplicable, match=why):
        collective_skip(source, "t.py", {})
