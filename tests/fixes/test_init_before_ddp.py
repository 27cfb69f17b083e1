"""P5's patch: an init run on the DDP-wrapped model moves before the wrap, onto the bare model."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.init_order import init_before_ddp

HEAD = "from torch.nn.parallel import DistributedDataParallel as DDP\n"


@pytest.mark.parametrize("before, after", [
    ("model = DDP(model)\nmodel.apply(init_weights)\n", "model.apply(init_weights)\nmodel = DDP(model)\n"),
    ("ddp = DDP(net, device_ids=[r])\nx = 1\nddp.module.reset_parameters()\n",
     "net.reset_parameters()\nddp = DDP(net, device_ids=[r])\nx = 1\n"),
    ("ddp = DDP(net)\nnn.init.xavier_uniform_(ddp.module.fc.weight)\n", "nn.init.xavier_uniform_(net.fc.weight)\nddp = DDP(net)\n"),
    ("# wrap\nmodel = DDP(model)\n# init\nmodel.apply(weights_init)\n",
     "# wrap\n# init\nmodel.apply(weights_init)\nmodel = DDP(model)\n"),
])
def test_the_init_moves_before_the_wrap_onto_the_bare_model(before, after):
    new, notes = init_before_ddp(HEAD + before, "t.py", {})
    assert new == HEAD + after
    assert "before DDP wraps it" in notes[0]


@pytest.mark.parametrize("source, why", [
    (HEAD + "model.apply(init_weights)\nmodel = DDP(model)\n", "no weight initialisation after DDP"),
    (HEAD + "model = DDP(model)\nmodel.apply(freeze_bn)\n", "no weight initialisation after DDP"),
    (HEAD + "model = DDP(model)\ninit_fn = make_init(cfg)\nmodel.apply(init_fn)\n", "reads init_fn, set after the wrap"),
])
def test_left_alone(source, why):
    with pytest.raises(NotApplicable, match=why):
        init_before_ddp(source, "t.py", {})
