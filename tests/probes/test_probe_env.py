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


def test_a_launch_without_torchruns_local_variables_still_forms_a_group():
    """QA25b B1: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are all env:// reads (a real gloo group forms with
    them alone); a launch without LOCAL_WORLD_SIZE or LOCAL_RANK (mpirun wrappers, DeepSpeed's launcher) was a
    confirmed D1."""
    bare = {k: v for k, v in FULL.items() if k not in ("LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID")}
    result = run(bare)
    assert result.status is Status.RULED_OUT, result
    assert result.entries == ("D1", "D3", "D27")
    assert any("LOCAL_WORLD_SIZE unset" in e for e in result.evidence)
    result = run({k: v for k, v in bare.items() if k != "LOCAL_RANK"})
    assert result.status is Status.RULED_OUT and result.entries == ("D1", "D27")  # no local rank: D3 stays open
    assert any("LOCAL_RANK, LOCAL_WORLD_SIZE unset" in e for e in result.evidence)


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


# SLURM: what srun and sbatch set, against what torch reads (probes/slurm.py)
BATCH = {"SLURM_JOB_ID": "77", "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "8(x2)",
         "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
STEP = dict(BATCH, SLURM_STEP_ID="0", SLURM_PROCID="9", SLURM_LOCALID="1", SLURM_NTASKS="16", SLURM_NODEID="1",
            SLURM_STEP_NUM_TASKS="16", SLURM_STEP_NUM_NODES="2", SLURM_STEP_TASKS_PER_NODE="8(x2)")
TORCH = {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "node0",
         "MASTER_PORT": "29500"}


def test_slurm_tasks_per_node_spec():
    from gpudoctor.probes.slurm import tasks_per_node

    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("8") == [8] and tasks_per_node("junk(x") is None and tasks_per_node("") is None


def test_the_batch_script_of_a_multinode_job_runs_on_one_node():
    warned = run(BATCH, gpus=8)  # nothing launched yet: a warning
    assert warned.status is Status.INCONCLUSIVE and warned.entries == ("D2",)
    assert "first node only" in warned.summary and any("the batch script" in e for e in warned.evidence)
    launched = run(dict(BATCH, TORCHELASTIC_RUN_ID="x"), gpus=8)  # torchrun started from the batch script
    assert launched.status is Status.CONFIRMED and launched.entries == ("D2",)
    assert run(dict(BATCH, SLURM_NNODES="1", SLURM_JOB_NUM_NODES="1")).status is Status.SKIPPED


def test_an_srun_task_without_the_torch_variables_is_d1():
    result = run(STEP, gpus=8)
    assert result.status is Status.INCONCLUSIVE and result.entries == ("D1",)
    assert "task 9 of 16" in result.summary and "SLURM_PROCID" in result.summary
    assert "srun task 9 of 16, local task 1, 8 tasks on this node, 2 nodes" in " ".join(result.evidence)


def test_torch_variables_that_are_not_this_tasks():
    result = run(dict(STEP, **dict(TORCH, RANK="0", LOCAL_RANK="0", WORLD_SIZE="8", MASTER_ADDR="localhost")), gpus=8)
    assert result.status is Status.CONFIRMED and result.entries == ("D1", "D2", "D3")
    text = " ".join(result.evidence)
    assert "WORLD_SIZE=8 but srun started 16 tasks" in text and "RANK=0 but this is task 9" in text
    assert "LOCAL_RANK=0 but this is local task 1" in text and "MASTER_ADDR=localhost on a step across 2" in text


def test_a_consistent_srun_task_is_ruled_out():
    result = run(dict(STEP, **TORCH), gpus=8)
    assert result.status is Status.RULED_OUT, result
    assert result.figures["slurm"]["procid"] == 9


def test_torchrun_in_every_one_of_several_tasks_per_node_is_d27():
    env = dict(STEP, **dict(TORCH, RANK="3", LOCAL_RANK="3"), TORCHELASTIC_RUN_ID="x")
    result = run(env, gpus=8)
    assert result.status is Status.CONFIRMED and result.entries == ("D27",)
    assert "8 tasks on this node and each runs torchrun" in result.summary
    one = dict(env, SLURM_STEP_TASKS_PER_NODE="1(x2)", SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2")
    assert run(one, gpus=8).status is Status.RULED_OUT
