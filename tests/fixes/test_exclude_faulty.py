"""MN8's fix: the launch command rewritten to leave the faulty GPU or its node out, per launcher; the facts from the
line that reported the fault; and the whole path from a log through `gpudoctor fix` in a subprocess."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.facts import facts_from_text
from gpudoctor.engine.fixes.launch import parse_launch, rewrite

HOW = "exclude-faulty-gpu"


def _new(cmd, **facts):
    new, notes = rewrite(cmd, HOW, facts)
    return shlex.split(new), notes


def test_srun_excludes_the_node_and_every_count_drops_by_one():
    words, notes = _new("srun -N 4 --gres=gpu:8 torchrun --nnodes=4 --nproc-per-node=8 train.py --lr 1",
                        bad_host="node17")
    assert words == ["srun", "-N", "3", "--gres=gpu:8", "--exclude=node17", "torchrun", "--nnodes=3",
                     "--nproc-per-node=8", "train.py", "--lr", "1"]
    assert any("scontrol update nodename=node17 state=drain" in n for n in notes)


def test_srun_folds_an_exclude_it_already_has_and_counts_a_glued_node_count_down():
    words, _ = _new("srun -N4 -x node3 accelerate launch --num_machines=4 --num_processes 32 train.py",
                    bad_host="node17")
    assert words == ["srun", "-N3", "--exclude=node3,node17", "accelerate", "launch", "--num_machines=3",
                     "--num_processes=24", "train.py"]
    words, _ = _new("srun --nodes=2 --exclude=a,b python train.py", bad_host="c")
    assert words[:3] == ["srun", "--nodes=1", "--exclude=a,b,c"]


def test_srun_without_a_node_count_says_to_submit_again_and_a_range_is_left_alone():
    words, notes = _new("srun --ntasks-per-node=1 torchrun --nnodes=2:4 train.py", bad_host="n2")
    assert words == ["srun", "--ntasks-per-node=1", "--exclude=n2", "torchrun", "--nnodes=2:4", "train.py"]
    assert any("sbatch --exclude=n2" in n for n in notes)
    with pytest.raises(NotApplicable, match="already excludes n2"):
        rewrite("srun -x n2 torchrun --nnodes=2 train.py", HOW, {"bad_host": "n2"})
    with pytest.raises(NotApplicable, match="bad_host"):
        rewrite("srun -N 2 torchrun --nnodes=2 train.py", HOW, {"bad_gpu": 1})


def test_deepspeed_takes_exclude_and_loses_the_counts_it_refuses_beside_it():
    words, notes = _new("deepspeed --num_gpus=8 train.py --deepspeed ds.json", bad_gpu=3)
    assert words == ["deepspeed", "--exclude=localhost:3", "train.py", "--deepspeed", "ds.json"]
    assert any("--num_gpus dropped" in n for n in notes)
    words, _ = _new("deepspeed --hostfile hf --exclude=w1 train.py", bad_host="w4")
    assert words == ["deepspeed", "--exclude=w1@w4", "--hostfile=hf", "train.py"]


@pytest.mark.parametrize("cmd, facts, says", [
    ("deepspeed --include=localhost:0,1 train.py", {"bad_gpu": 1}, "take the faulty GPU out of that list"),
    ("deepspeed --hostfile=hf train.py", {"bad_gpu": 1}, "which one"),
    ("torchrun --nproc-per-node=gpu train.py", {"bad_gpu": 1}, "--param nproc=N"),
    ("torchrun --nproc-per-node=4 train.py", {"bad_gpu": 4}, "GPUs 0 to 3"),
    ("CUDA_VISIBLE_DEVICES=2,3 torchrun --nproc-per-node=2 train.py", {"bad_gpu": 1}, "does not list GPU 1"),
    ("CUDA_VISIBLE_DEVICES=5 torchrun --nproc-per-node=1 train.py", {"bad_gpu": 5}, "only one"),
    ("torchrun --nnodes=4:8 train.py", {"bad_host": "n1"}, "is a range"),
    ("torchrun --nproc-per-node=8 train.py", {"bad_host": "n1"}, "whole job runs on n1"),
    ("torchrun --nnodes=2 train.py", {"bad_gpu": 1}, "bad_host=NODE"),
    ("python train.py", {"bad_gpu": 0}, "CUDA_VISIBLE_DEVICES"),
    ("torchrun --nproc-per-node=4 train.py", {}, "nvidia-smi -q -d ECC"),
    ("torchrun --nproc-per-node=4 train.py", {"bad_gpu": "3b:00.0"}, "expected the GPU's index"),
])
def test_what_cannot_be_rewritten_says_what_is_missing(cmd, facts, says):
    with pytest.raises(NotApplicable, match=says.replace("(", r"\(").replace(".", r"\.")):
        rewrite(cmd, HOW, facts)


def test_one_node_lists_the_healthy_gpus_and_starts_one_process_fewer():
    words, notes = _new("OMP_NUM_THREADS=4 torchrun --nproc-per-node=4 --max-restarts=1 train.py -c x.yaml", bad_gpu=2)
    assert words == ["OMP_NUM_THREADS=4", "CUDA_VISIBLE_DEVICES=0,1,3", "torchrun", "--nproc-per-node=3",
                     "--max-restarts=1", "train.py", "-c", "x.yaml"]
    assert any("global batch" in n for n in notes)
    words, _ = _new("CUDA_VISIBLE_DEVICES=2,3,4,5 torchrun --nproc-per-node=4 train.py", bad_gpu=4)
    assert words[:3] == ["CUDA_VISIBLE_DEVICES=2,3,5", "torchrun", "--nproc-per-node=3"]
    words, _ = _new("accelerate launch --multi_gpu train.py", bad_gpu=0, nproc=2)
    assert words == ["CUDA_VISIBLE_DEVICES=1", "accelerate", "launch", "--num_processes=1", "--multi_gpu", "train.py"]


def test_several_nodes_without_srun_run_on_one_node_fewer():
    words, notes = _new("torchrun --nnodes=4 --node-rank=2 --rdzv-endpoint=node17:29400 train.py", bad_host="node17")
    assert words == ["torchrun", "--nnodes=3", "--node-rank=2", "--rdzv-endpoint=node17:29400", "train.py"]
    assert any("do not start this command on node17" in n for n in notes)
    assert any("rendezvous is on node17" in n for n in notes)
    assert any("renumber --node-rank" in n for n in notes)
    launch = parse_launch(shlex.join(words))
    assert (launch.script, launch.args) == ("train.py", [])


def test_the_fault_line_names_the_host_and_device_other_lines_do_not():
    nccl = "node17:1234:5678 [3] NCCL WARN Cuda failure 'uncorrectable ECC error encountered'"
    assert {"bad_host": "node17", "bad_gpu": 3}.items() <= facts_from_text([], [nccl]).items()
    pdsh = "worker-3: RuntimeError: CUDA error: uncorrectable ECC error encountered"
    assert facts_from_text([], [pdsh])["bad_host"] == "worker-3"
    timeout = "node02:99:99 [1] NCCL INFO comm 0x1 rank 1 nranks 16 - Abort COMPLETE"
    facts = facts_from_text([], [timeout])
    assert "bad_host" not in facts and "bad_gpu" not in facts


def test_fix_from_a_log_takes_the_host_from_the_line_that_reported_the_fault(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(
        "worker-1: [rank0]: step 1200 loss 2.31\n"
        "worker-2: Traceback (most recent call last):\n"
        "worker-2:   File \"train.py\", line 88, in <module>\n"
        "worker-2:     loss.backward()\n"
        "worker-2: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
        "worker-2: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect.\n")
    cmd = "srun -N 2 torchrun --nnodes=2 --nproc-per-node=8 train.py"
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "fix", "--json", "--log", str(log), "--cmd", cmd],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["entry"] == "MN8"
    [fix] = [f for f in plan["fixes"] if f["action"] == HOW]
    assert shlex.split(fix["commands"][0]) == ["srun", "-N", "1", "--exclude=worker-2", "torchrun", "--nnodes=1",
                                               "--nproc-per-node=8", "train.py"]
