"""D15's patch: a FULL_STATE_DICT save gathers into host memory (offload_to_cpu), on rank 0 only where only it reads."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.fsdp import full_state_dict_offload
from gpudoctor.engine.lint import lint_source

HEAD = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType\n"
IMPORT = "from torch.distributed.fsdp import FullStateDictConfig\n"


def test_rank0_only_when_every_read_is_under_a_rank0_test():
    body = ("def save(model, rank):\n    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):\n"
            "        sd = model.state_dict()\n    if rank == 0:\n        torch.save(sd, 'm.pt')\n")
    new, notes = full_state_dict_offload(HEAD + body, "t.py", {})
    assert new == HEAD + IMPORT + body.replace(
        "    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):",
        "    save_config = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)\n"
        "    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, save_config):")
    assert "rank0_only=True" in notes[1]


def test_no_rank0_only_when_every_rank_reads_the_dict():
    body = ("with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):\n    sd = model.state_dict()\n"
            "torch.save(sd, f'm{rank}.pt')\n")
    new, notes = full_state_dict_offload(HEAD + body, "t.py", {})
    assert "save_config = FullStateDictConfig(offload_to_cpu=True)\n" in new
    assert "rank0_only is left off" in notes[1]


@pytest.mark.parametrize("config, expected", [
    ("FullStateDictConfig(rank0_only=True)", "FullStateDictConfig(rank0_only=True, offload_to_cpu=True)"),
    ("FullStateDictConfig(offload_to_cpu=False, rank0_only=True)",
     "FullStateDictConfig(offload_to_cpu=True, rank0_only=True)"),
])
def test_an_inline_config_gains_the_flag(config, expected):
    body = f"with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, {config}):\n    sd = model.state_dict()\n"
    new, _ = full_state_dict_offload(HEAD + "from torch.distributed.fsdp import FullStateDictConfig\n" + body, "t.py", {})
    assert expected in new and "save_config" not in new


@pytest.mark.parametrize("config, expected", [
    ("FullStateDictConfig()", "FullStateDictConfig(offload_to_cpu=True, rank0_only=True)"),
    ("FullStateDictConfig(False, False)", "FullStateDictConfig(True, True)"),
])
def test_an_inline_config_read_on_rank0_only_gains_rank0_only_as_the_note_says(config, expected):
    """QA25 Q6: the note said rank0_only=True, the diff added offload_to_cpu alone (every rank still gathered)."""
    body = (f"def save(model, rank):\n    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, {config}):\n"
            "        sd = model.state_dict()\n    if rank == 0:\n        torch.save(sd, 'm.pt')\n")
    new, notes = full_state_dict_offload(HEAD + IMPORT + body, "t.py", {})
    assert expected in new and "rank0_only=True" in " ".join(notes)


def test_keyword_call_gets_a_keyword_config():
    body = "with FSDP.state_dict_type(model, state_dict_type=StateDictType.FULL_STATE_DICT):\n    sd = model.state_dict()\n"
    new, _ = full_state_dict_offload(HEAD + body, "t.py", {})
    assert "state_dict_type=StateDictType.FULL_STATE_DICT, state_dict_config=save_config)" in new


@pytest.mark.parametrize("body, why", [
    ("with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):\n    model.load_state_dict(sd)\n", "no FULL"),
    ("with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):\n    sd = model.state_dict()\n", "no FULL"),
    ("cfg = FullStateDictConfig(offload_to_cpu=True)\n"
     "with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):\n    sd = model.state_dict()\n", "no FULL"),
    ("model = FSDP(net, device_id=torch.device('cpu'))\n"
     "with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):\n    sd = model.state_dict()\n", "on the CPU"),
])
def test_left_alone(body, why):
    with pytest.raises(NotApplicable, match=why):
        full_state_dict_offload(HEAD + body, "t.py", {})


def test_lint_and_fix_agree():
    source = HEAD + "with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):\n    sd = model.state_dict()\n"
    assert [f.entry_id for f in lint_source(source, "t.py").findings] == ["D15"]
    new, _ = full_state_dict_offload(source, "t.py", {})
    assert "D15" not in [f.entry_id for f in lint_source(new, "t.py").findings]
