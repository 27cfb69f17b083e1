"""The env-contract probe (D1, D3) on injected environments, and the cross-rank checks."""
from __future__ import annotations

from gpudoctor.probes import env as env_probe
from gpudoctor.probes.base import Status

FULL = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "node0",
        "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}


def run(env, gpus=2):
    return env_probe.probe({"env": env, "gpu_count": gpus})


def test_not_launched_is_skipped():
    result = run({"CUDA_VISIBLE_DEVICES": "0,1"})
    assert result.status is Status.SKIPPED and "torchrun" in result.summary
    assert result.figures["gpus_visible"] == 2


def test_complete_contract_is_ruled_out():
    result = run(FULL)
    assert result.status is Status.RULED_OUT, result
    assert result.entries == ("D1", "D3", "D27")


def test_missing_variables():
    env = {k: v for k, v in FULL.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    result = run(env)
    assert result.status is Status.CONFIRMED and result.entries == ("D1",)
    assert "missing MASTER_ADDR, MASTER_PORT" in result.summary


def test_rank_outside_the_world():
    result = run(dict(FULL, RANK="4"))
    assert result.status is Status.CONFIRMED and "RANK=4 is outside 0..3" in result.summary


def test_more_local_ranks_than_gpus():
    result = run(dict(FULL, LOCAL_WORLD_SIZE="4", LOCAL_RANK="3"), gpus=2)
    assert result.status is Status.CONFIRMED and result.entries == ("D27",)
    assert "ranks would share GPUs or find none" in result.summary


def test_cuda_visible_devices_limits_the_gpus():
    result = run(dict(FULL, CUDA_VISIBLE_DEVICES="0"), gpus=8)
    assert result.figures["gpus_visible"] == 1
    assert result.status is Status.CONFIRMED  # LOCAL_RANK 1 has no GPU when only one is visible


def test_cross_rank_duplicates_and_shared_gpus():
    views = [
        {"rank": 0, "local_rank": 0, "local_world_size": 2, "host": "a", "device": {"current": 0, "uuid": "GPU-1"},
         "problems": []},
        {"rank": 1, "local_rank": 0, "local_world_size": 2, "host": "a", "device": {"current": 0, "uuid": "GPU-1"},
         "problems": []},
        None,
    ]
    problems = env_probe.cross_rank_problems(views, 3)
    texts = [t for _, t in problems]
    assert any("ranks [2] did not report" in t for t in texts)
    assert any("both have LOCAL_RANK 0 on a" in t for t in texts)
    assert any("share one GPU on a" in t for t in texts)
