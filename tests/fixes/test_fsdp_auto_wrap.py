"""D12's patch: the one FSDP1 call of a script that wraps only the root gains a size-based auto_wrap_policy."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.fsdp import fsdp_auto_wrap

HEAD = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
IMPORTS = "import functools\nfrom torch.distributed.fsdp.wrap import size_based_auto_wrap_policy\n"


@pytest.mark.parametrize("facts, threshold", [({}, "100_000_000"), ({"min_num_params": "5e6"}, "5_000_000"),
                                              ({"min_num_params": 20000}, "20_000")])
def test_the_policy_is_added_with_the_threshold(facts, threshold):
    new, notes = fsdp_auto_wrap(HEAD + "model = FSDP(model, device_id=rank)\n", "t.py", facts)
    assert new == (HEAD + IMPORTS + "model = FSDP(model, device_id=rank, auto_wrap_policy=functools.partial("
                   f"size_based_auto_wrap_policy, min_num_params={threshold}))\n")
    assert "own FSDP unit" in notes[0]


@pytest.mark.parametrize("source, why", [
    (HEAD + "model = FSDP(model, auto_wrap_policy=policy)\n", "no single FSDP"),
    (HEAD + "for i, b in enumerate(m.blocks):\n    m.blocks[i] = FSDP(b)\nm = FSDP(m)\n", "2 FSDP calls"),
    (HEAD + "from torch.distributed.fsdp.wrap import enable_wrap, wrap\nwith enable_wrap(wrapper_cls=FSDP):\n"
            "    m = wrap(m)\nm = FSDP(m)\n", "builds its FSDP units itself"),
    (HEAD + "model = FSDP(model, **kwargs)\n", "no single FSDP"),
    ("from torch.distributed.fsdp import fully_shard\nfully_shard(model)\n", "builds its FSDP units itself"),
])
def test_left_alone(source, why):
    with pytest.raises(NotApplicable, match=why):
        fsdp_auto_wrap(source, "t.py", {})


@pytest.mark.parametrize("value", ["many", "0"])
def test_a_bad_threshold_is_refused(value):
    with pytest.raises(NotApplicable, match="min_num_params"):
        fsdp_auto_wrap(HEAD + "model = FSDP(model)\n", "t.py", {"min_num_params": value})
