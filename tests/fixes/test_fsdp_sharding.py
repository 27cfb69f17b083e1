"""D13's fixes: the FSDP sharding strategy set in the script (FSDP1, FSDP2, the HF Trainer) and in an Accelerate
config, to the strategy --param sharding_strategy names (HYBRID_SHARD by default)."""
from __future__ import annotations

import pytest
import yaml

from gpudoctor.engine.fixes.errors import FixError, NotApplicable
from gpudoctor.engine.fixes.fsdp_config import accelerate_fsdp_strategy
from gpudoctor.engine.fixes.patches.sharding import fsdp_sharding_strategy

HEAD = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"


@pytest.mark.parametrize("given, name", [({}, "HYBRID_SHARD"), ({"sharding_strategy": "shard_grad_op"}, "SHARD_GRAD_OP"),
                                         ({"sharding_strategy": "ShardingStrategy.NO_SHARD"}, "NO_SHARD"),
                                         ({"sharding_strategy": "hybrid_shard_zero2"}, "_HYBRID_SHARD_ZERO2")])
def test_fsdp1_gains_the_strategy_and_its_import_joins_the_fsdp_line(given, name):
    new, notes = fsdp_sharding_strategy(HEAD + "model = FSDP(model, device_id=rank)\n", "t.py", given)
    assert new == ("from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy\n"
                   f"model = FSDP(model, device_id=rank, sharding_strategy=ShardingStrategy.{name})\n")
    assert notes[0].startswith(f"FSDP(...): {name}")


def test_a_strategy_already_chosen_is_replaced_and_the_same_one_is_left():
    source = (HEAD + "from torch.distributed.fsdp import ShardingStrategy\n"
              "model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD)\n")
    new, _ = fsdp_sharding_strategy(source, "t.py", {"sharding_strategy": "SHARD_GRAD_OP"})
    assert new.endswith("model = FSDP(model, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP)\n")
    assert new.count("import ShardingStrategy") == 1
    with pytest.raises(NotApplicable, match="already SHARD_GRAD_OP"):  # planning again finds nothing left to do
        fsdp_sharding_strategy(new, "t.py", {"sharding_strategy": "SHARD_GRAD_OP"})


def test_every_fsdp1_call_of_a_hand_wrapped_model_changes():
    source = HEAD + "for i, b in enumerate(m.blocks):\n    m.blocks[i] = FSDP(b)\nm = FullyShardedDataParallel(m)\n"
    new, _ = fsdp_sharding_strategy(source, "t.py", {"sharding_strategy": "FULL_SHARD"})
    assert new.count("sharding_strategy=ShardingStrategy.FULL_SHARD") == 2


@pytest.mark.parametrize("name, value", [("SHARD_GRAD_OP", "False"), ("FULL_SHARD", "True")])
def test_fsdp2_gets_the_reshard_after_forward_that_means_the_same(name, value):
    source = "from torch.distributed.fsdp import fully_shard\nfor b in m.layers:\n    fully_shard(b)\nfully_shard(m)\n"
    new, _ = fsdp_sharding_strategy(source, "t.py", {"sharding_strategy": name})
    assert new.count(f"reshard_after_forward={value})") == 2
    assert "ShardingStrategy" not in new


def test_fsdp2_hybrid_is_refused_with_the_mesh_it_needs():
    with pytest.raises(NotApplicable, match="2-D device mesh"):
        fsdp_sharding_strategy("from torch.distributed.fsdp import fully_shard\nfully_shard(m)\n", "t.py", {})


def test_the_trainer_fsdp_words_keep_their_other_options():
    source = 'args = TrainingArguments("out", fsdp="full_shard auto_wrap offload", bf16=True)\n'
    new, notes = fsdp_sharding_strategy(source, "t.py", {})
    assert new == 'args = TrainingArguments("out", fsdp="hybrid_shard auto_wrap offload", bf16=True)\n'
    assert "ShardingStrategy" not in new
    with pytest.raises(NotApplicable):
        fsdp_sharding_strategy(new, "t.py", {})


@pytest.mark.parametrize("source, why", [
    (HEAD + "model = FSDP(model, **fsdp_kwargs)\n", "from \\*\\*kwargs"),
    ("import torch\nmodel = torch.nn.Linear(2, 2)\n", "no FSDP"),
])
def test_left_alone(source, why):
    with pytest.raises(NotApplicable, match=why):
        fsdp_sharding_strategy(source, "t.py", {})


def test_an_unknown_strategy_is_refused_with_the_choices():
    with pytest.raises(NotApplicable, match="must be one of FULL_SHARD"):
        fsdp_sharding_strategy(HEAD + "m = FSDP(m)\n", "t.py", {"sharding_strategy": "zero3"})


CONFIG = "distributed_type: FSDP\nfsdp_config:\n  fsdp_offload_params: false\n{line}  fsdp_use_orig_params: true\nnum_processes: 16\n"


@pytest.mark.parametrize("line, given, expect", [
    ("  fsdp_sharding_strategy: FULL_SHARD  # kept\n", {}, "  fsdp_sharding_strategy: HYBRID_SHARD  # kept\n"),
    ("  fsdp_sharding_strategy: 1\n", {"sharding_strategy": "SHARD_GRAD_OP"}, "  fsdp_sharding_strategy: 2\n"),
    ("  fsdp_reshard_after_forward: FULL_SHARD\n", {}, "  fsdp_reshard_after_forward: HYBRID_SHARD\n"),
    ("", {}, "  fsdp_sharding_strategy: 4  # HYBRID_SHARD\n"),
])
def test_the_accelerate_config_gets_the_strategy_in_its_own_form(line, given, expect):
    text = CONFIG.format(line=line)
    new, notes = accelerate_fsdp_strategy(text, "acc.yaml", given)
    if line:
        assert new == CONFIG.format(line=expect)
    else:  # added at the top of the block
        assert new == CONFIG.format(line="").replace("fsdp_config:\n", "fsdp_config:\n" + expect)
    assert yaml.safe_load(new)["num_processes"] == 16  # the rest untouched
    with pytest.raises(NotApplicable, match="already"):
        accelerate_fsdp_strategy(new, "acc.yaml", given)


def test_an_fsdp2_config_takes_reshard_after_forward_and_refuses_hybrid():
    text = "fsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: true\n"
    new, _ = accelerate_fsdp_strategy(text, "acc.yaml", {"sharding_strategy": "SHARD_GRAD_OP"})
    assert new == "fsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n"
    with pytest.raises(NotApplicable, match="dp_replicate_size"):
        accelerate_fsdp_strategy(text, "acc.yaml", {})


@pytest.mark.parametrize("text, error", [
    ("distributed_type: MULTI_GPU\nnum_processes: 8\n", NotApplicable),
    ("fsdp_config: [unclosed\n", FixError),
])
def test_configs_it_cannot_edit(text, error):
    with pytest.raises(error):
        accelerate_fsdp_strategy(text, "acc.yaml", {})
