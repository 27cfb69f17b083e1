"""P2's patch: the model moved to its device inside the DDP call instead of after the wrap."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.ddp import move_before_ddp


@pytest.mark.parametrize("before, after", [
    ("m = Net()\nm = DDP(m, device_ids=[r])\nm.to(dev)\n", "m = Net()\nm = DDP(m.to(dev), device_ids=[r])\n"),
    ("m = Net()\nw = DDP(m)\nw = w.cuda(r)\nrun(w)\n", "m = Net()\nw = DDP(m.cuda(r))\nrun(w)\n"),
    ("m = Net()\nm = DDP(m).cuda()\n", "m = Net()\nm = DDP(m.cuda())\n"),
    ("def f():\n    m = Net()\n    m = nn.parallel.DistributedDataParallel(m)\n    # go\n    m.to(d)\n    g(m)\n",
     "def f():\n    m = Net()\n    m = nn.parallel.DistributedDataParallel(m.to(d))\n    # go\n    g(m)\n"),  # comment kept
])
def test_the_move_goes_into_the_ddp_call(before, after):
    new, notes = move_before_ddp(before, "train.py", {})
    assert new == after and "before DDP wraps it" in notes[0]


@pytest.mark.parametrize("source", [
    "m = Net().to(dev)\nm = DDP(m)\n",  # moved before: nothing to do
    "m = Net()\nm = DDP(m.to(dev))\n",  # moved inside the call already
    "m = Net()\nm = DDP(m)\n",  # never moved (a CPU/gloo run)
    "m = Net()\nm = DDP(m)\nif ok:\n    m.to(dev)\n",  # moved in another block: left to the reader
    "m = Net()\nm = DDP(m)\nother.to(dev)\n",  # another object moved
])
def test_nothing_to_move_or_a_move_elsewhere_is_not_applicable(source):
    with pytest.raises(NotApplicable):
        move_before_ddp(source, "train.py", {})
