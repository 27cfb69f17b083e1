"""A log that stops while waiting for the other processes to join the group: a possible D2 (engine/init_wait.py)."""
from __future__ import annotations

import io

import pytest

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.init_wait import waiting_at_init
from gpudoctor.engine.sources import Source
from gpudoctor.kb.catalog import load_catalog

CATALOG = load_catalog(use_cache=False)

# the lines Lightning 1.4 prints (plugins/training_type/ddp.py) on the first node of a two-node job whose second
# node never started
LIGHTNING_14 = """\
Multi-processing is handled by Slurm.
GPU available: True, used: True
TPU available: False, using: 0 TPU cores
initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8
"""
REGISTERED = LIGHTNING_14 + """\
----------------------------------------------------------------------------------------------------
distributed_backend=nccl
All DDP processes registered. Starting ddp with 8 processes
----------------------------------------------------------------------------------------------------
"""


def run(text: str):
    return diagnose(CATALOG, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))


def test_a_log_that_ends_at_the_init_announcement_names_d2_as_possible():
    d = run(LIGHTNING_14)
    assert [(f.id, f.tier) for f in d.findings][:1] == [("D2", "possible")]
    assert d.findings[0].evidence[0].line == 4 and "GLOBAL_RANK: 0" in d.findings[0].evidence[0].text


@pytest.mark.parametrize("text", [
    REGISTERED,  # the group formed
    LIGHTNING_14 + "Traceback (most recent call last):\nRuntimeError: boom\n",  # it failed instead of waiting
    "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/1\n",  # a group of one waits for nobody
    # every member announced itself: all reached the store
    "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in range(4)),
    LIGHTNING_14 + "Epoch 0:  12%|#2        | 30/250 [00:10<01:13, 3.0it/s, loss=2.31]\n",  # training went on
])
def test_no_hint_when_the_group_formed_or_the_run_went_on(text):
    assert waiting_at_init(text, "x.log") is None


def test_torch_store_based_barrier_wait_and_its_completion():
    began = "INFO:torch.distributed.distributed_c10d:Added key: store_based_barrier_key:1 to store for rank: 0\n"
    assert waiting_at_init("loading data\n" + began, "x.log")
    done = began + "INFO:torch.distributed.distributed_c10d:Rank 0: Completed store-based barrier for key:store_based_barrier_key:1 with 16 nodes.\n"
    assert waiting_at_init(done, "x.log") is None


def test_the_announcement_must_be_near_the_end():
    text = LIGHTNING_14 + "".join(f"loading shard {i}\n" for i in range(10))
    assert waiting_at_init(text, "x.log") is None


def test_cli_exit_1_and_the_hint_first(tmp_path, cli_proc):
    log = tmp_path / "node0.log"
    log.write_text(LIGHTNING_14)
    out = cli_proc("diagnose", str(log), env={"NO_COLOR": "1", "COLUMNS": "80"})
    assert out.code == 1, out.err
    assert " 1. D2 " in out.out and "possible" in out.out


def _announce(ranks, world, form="Initializing distributed"):
    return "".join(f"{form}: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{world}\n" for r in ranks)


@pytest.mark.parametrize("text", [
    _announce([0, 1, 2, 3, 0, 1, 2, 3], 8),  # Lightning 1.6-2.x, two nodes each as node 0
    _announce([1, 1, 0, 0], 4, "initializing ddp"),  # Lightning 1.x, interleaved
    "GPU available: True (cuda), used: True\n" + _announce([0, 1], 4) + "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1]\n"
    + _announce([0, 1], 4),
])
def test_ranks_announced_twice_and_the_rest_never_is_d2(text):
    from gpudoctor.engine.init_wait import duplicate_rank_rule

    (v,) = duplicate_rank_rule(text, "log")
    assert (v.entry, v.tier) == ("D2", "match") and "each started as node 0" in v.note
    assert run(text).findings[0].id == "D2" and run(text).findings[0].tier == "match"


@pytest.mark.parametrize("text", [
    _announce(range(8), 8) + "Epoch 0: 10%\nRestarting\n" + _announce(range(8), 8),  # a restart, all members
    _announce([0, 1], 4) + "".join(f"step {i} loss 0.1\n" for i in range(40)) + _announce([0, 1], 4),  # far apart
    _announce([0, 1, 0], 4),  # uneven repeats: not one block per node
    _announce([0, 1], 4),  # announced once: the waiting hint's case, not this one
])
def test_no_d2_from_repeats_a_restart_or_a_cut_log_explains(text):
    from gpudoctor.engine.init_wait import duplicate_rank_rule

    assert duplicate_rank_rule(text, "log") == []
