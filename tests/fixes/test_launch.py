"""Launch command rewrites: rebuilt with shlex.join, parsed back, script and its arguments kept, per entry."""
from __future__ import annotations

import shlex
import socket

import pytest

from gpudoctor.engine.fixes import FixError, plan_fix
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.launch import parse_launch, rewrite
from gpudoctor.kb.catalog import load_catalog


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_cache=False)


def _words(cmd):
    return shlex.split(cmd)


def test_d1_python_becomes_torchrun_standalone():
    new, notes = rewrite('python -u train.py --lr 3e-4 --name "my run"', "torchrun-standalone", {"nproc": 4})
    assert _words(new) == ["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=4",
                           "train.py", "--lr", "3e-4", "--name", "my run"]
    assert any("-u" in n for n in notes)


def test_d1_drops_hand_set_rank_env_and_keeps_others():
    new, _ = rewrite("RANK=0 WORLD_SIZE=2 OMP_NUM_THREADS=4 python train.py", "torchrun-standalone", {})
    assert _words(new) == ["OMP_NUM_THREADS=4", "torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=gpu", "train.py"]


def test_d1_module_form():
    new, _ = rewrite("python -m mypkg.train --epochs 3", "torchrun-standalone", {"world_size": 2})
    launch = parse_launch(new)
    assert launch.launcher == "torchrun" and launch.module and launch.script == "mypkg.train"
    assert launch.args == ["--epochs", "3"]


def test_d2_multinode_form_fills_facts():
    cmd = "torchrun --standalone --nproc-per-node=8 --max-restarts=3 train.py --cfg a.yaml"
    new, notes = rewrite(cmd, "torchrun-multinode", {"nnodes": 4, "master_addr": "10.0.0.5", "rdzv_port": 29400,
                                                      "job_id": "run7"})
    assert _words(new) == ["torchrun", "--nnodes=4", "--nproc-per-node=8", "--rdzv-id=run7", "--rdzv-backend=c10d",
                           "--rdzv-endpoint=10.0.0.5:29400", "--max-restarts=3", "train.py", "--cfg", "a.yaml"]
    assert "--standalone" not in new
    assert any("every node" in n for n in notes)


def test_d2_without_address_says_what_to_replace():
    new, notes = rewrite("python train.py", "torchrun-multinode", {})
    assert "--rdzv-endpoint=HEAD_NODE_IP:29400" in _words(new)
    assert any("HEAD_NODE_IP" in n for n in notes)


def test_d4_single_node_torchrun_gets_localhost_0():
    new, _ = rewrite("torchrun --nproc-per-node=2 --master-port=29500 train.py", "free-port", {"port": 29500})
    assert _words(new) == ["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", "--nnodes=1",
                           "--nproc-per-node=2", "train.py"]


def test_d4_multinode_torchrun_gets_a_port_that_is_free():
    new, _ = rewrite("torchrun --nnodes=2 --node-rank=0 --master-addr=h0 --master-port 29500 train.py", "free-port",
                     {"port": 29500})
    port = int(parse_launch(new).option("--master-port"))
    assert port != 29500
    with socket.socket() as s:  # nothing listens there: we can bind it
        s.bind(("127.0.0.1", port))
    assert parse_launch(new).option("--master-addr") == "h0"


def test_d4_multinode_planned_on_another_node_leaves_the_port_to_the_master():
    new, notes = rewrite("torchrun --nnodes=2 --node-rank=1 --master-addr=10.0.0.1 --master-port=29500 train.py",
                         "free-port", {"port": 29500})
    assert parse_launch(new).option("--master-port") == "$MASTER_PORT" and "--master-port=$MASTER_PORT" in new.split()
    assert any("free on the master node (10.0.0.1)" in n for n in notes)
    given, _ = rewrite("torchrun --nnodes=2 --node-rank=1 --master-addr=10.0.0.1 --master-port=29500 train.py",
                       "free-port", {"port": 29500, "free_port": 29611})
    assert parse_launch(given).option("--master-port") == "29611"


def test_d4_python_env_accelerate_and_deepspeed_forms():
    facts = {"free_port": 29611}
    assert _words(rewrite("MASTER_PORT=29500 python train.py", "free-port", facts)[0]) == \
        ["MASTER_PORT=29611", "python", "train.py"]
    assert _words(rewrite("accelerate launch --main_process_port 29500 train.py", "free-port", facts)[0]) == \
        ["accelerate", "launch", "--main_process_port=29611", "train.py"]
    assert _words(rewrite("deepspeed train.py --deepspeed ds.json", "free-port", facts)[0]) == \
        ["deepspeed", "--master_port=29611", "train.py", "--deepspeed", "ds.json"]


def test_d5_accelerate_multi_gpu():
    new, _ = rewrite("accelerate launch --mixed_precision bf16 train.py --bs 8", "accelerate-multi-gpu", {"nproc": 4})
    assert _words(new) == ["accelerate", "launch", "--multi_gpu", "--num_processes=4", "--mixed_precision=bf16",
                           "train.py", "--bs", "8"]


def test_d6_deepspeed_with_hostfile_and_config():
    new, notes = rewrite("python train.py", "deepspeed-launcher", {"nnodes": 2, "nproc": 8, "ds_config": "ds.json"})
    assert _words(new) == ["deepspeed", "--hostfile=hostfile", "--num_nodes=2", "--num_gpus=8", "train.py",
                           "--deepspeed", "ds.json"]
    assert any("hostfile" in n for n in notes)


def test_d6_keeps_the_nodes_the_launch_asked_for():
    """QA23 A1: the rewrite once dropped --num_nodes 2 and added no hostfile, turning two nodes into one."""
    new, notes = rewrite("deepspeed --num_nodes 2 --num_gpus 8 train.py --deepspeed ds.json", "deepspeed-launcher", {})
    words = _words(new)
    assert "--hostfile=hostfile" in words and "--num_nodes=2" in words and "--num_gpus=8" in words
    assert any("`hostfile`" in n and "slots" in n for n in notes)
    with pytest.raises(NotApplicable):  # with its hostfile, the launch is already what the fix would write
        rewrite(shlex.join(words), "deepspeed-launcher", {})


def test_d27_one_process_per_visible_gpu():
    new, notes = rewrite("torchrun --standalone --nproc_per_node=8 train.py --bs 8", "nproc-to-gpus", {})
    assert _words(new) == ["torchrun", "--nproc-per-node=gpu", "--standalone", "train.py", "--bs", "8"]
    assert any("one process per GPU" in n for n in notes)
    new, _ = rewrite("torchrun --nproc_per_node 8 train.py", "nproc-to-gpus", {"nproc": 4})
    assert _words(new) == ["torchrun", "--nproc-per-node=4", "train.py"]
    new, notes = rewrite("deepspeed --num_gpus=8 train.py --deepspeed ds.json", "nproc-to-gpus", {})
    assert _words(new) == ["deepspeed", "train.py", "--deepspeed", "ds.json"]
    new, _ = rewrite("accelerate launch --num_processes 8 --mixed_precision bf16 train.py", "nproc-to-gpus",
                     {"nproc": 2})
    assert _words(new) == ["accelerate", "launch", "--num_processes=2", "--mixed_precision=bf16", "train.py"]
    with pytest.raises(NotApplicable):  # accelerate cannot count the GPUs of every machine by itself
        rewrite("accelerate launch --num_processes 8 train.py", "nproc-to-gpus", {})
    with pytest.raises(NotApplicable):  # one process: nothing to count
        rewrite("python train.py", "nproc-to-gpus", {})


def test_d3_drops_the_literal_local_rank_and_keeps_the_launcher():
    new, notes = rewrite("CUDA_VISIBLE_DEVICES=0,1,2,3 python -m torch.distributed.launch --nproc_per_node=4 --use_env "
                         "--master_port 12345 main.py --local_rank 0 --cfg c.yaml", "drop-literal-local-rank", {})
    assert _words(new) == ["CUDA_VISIBLE_DEVICES=0,1,2,3", "python", "-m", "torch.distributed.launch",
                           "--nproc_per_node=4", "--use_env", "--master_port=12345", "main.py", "--cfg", "c.yaml"]
    assert any("LOCAL_RANK" in n for n in notes)
    new, _ = rewrite("torchrun --nproc-per-node=8 train.py --local-rank=0 --lr 1", "drop-literal-local-rank", {})
    assert _words(new) == ["torchrun", "--nproc-per-node=8", "train.py", "--lr", "1"]
    with pytest.raises(NotApplicable):  # the launcher's own --local_rank=i comes last and wins
        rewrite("python -m torch.distributed.launch --nproc_per_node=4 main.py --local_rank 0",
                "drop-literal-local-rank", {})


def test_d27_under_srun_one_launcher_per_node():
    cmd = "OMP_NUM_THREADS=4 srun -N 2 --ntasks-per-node=8 -l --gres=gpu:8 torchrun --nnodes=2 --nproc-per-node=8 t.py --lr 1"
    assert parse_launch(cmd).wrapper == ["srun", "-N", "2", "--ntasks-per-node=8", "-l", "--gres=gpu:8"]
    new, notes = rewrite(cmd, "srun-one-task-per-node", {})
    assert _words(new) == ["OMP_NUM_THREADS=4", "srun", "-N", "2", "-l", "--gres=gpu:8", "--ntasks-per-node=1",
                           "torchrun", "--nnodes=2", "--nproc-per-node=8", "t.py", "--lr", "1"]
    assert any("one torchrun per node" in n for n in notes)
    new, _ = rewrite("srun --ntasks 16 accelerate launch --multi_gpu t.py", "srun-one-task-per-node", {})
    assert _words(new) == ["srun", "--ntasks-per-node=1", "accelerate", "launch", "--multi_gpu", "t.py"]
    with pytest.raises(NotApplicable, match="fewer workers per copy"):  # the worker count was never the problem
        rewrite(cmd, "nproc-to-gpus", {})
    with pytest.raises(NotApplicable, match="srun's task count is the rank count"):
        rewrite("srun -n 16 python t.py", "srun-one-task-per-node", {})
    with pytest.raises(NotApplicable, match="no srun"):
        rewrite("torchrun --nproc-per-node=8 t.py", "srun-one-task-per-node", {})


def test_d2_in_a_batch_script_srun_starts_the_launcher_on_every_node():
    new, notes = rewrite("NCCL_DEBUG=INFO torchrun --nnodes=2 --nproc-per-node=8 t.py", "srun-per-node", {})
    # no rendezvous endpoint: every node's torchrun would wait alone, so they meet at the first node's
    assert _words(new) == ["NCCL_DEBUG=INFO", "srun", "--ntasks-per-node=1", "torchrun", "--nnodes=$SLURM_NNODES",
                           "--nproc-per-node=8", "--rdzv-id=$SLURM_JOB_ID", "--rdzv-backend=c10d",
                           "--rdzv-endpoint=$HEAD_NODE:29400", "t.py"]
    assert "--nnodes=$SLURM_NNODES" in new.split() and any("scontrol show hostnames" in n for n in notes)
    kept, _ = rewrite("torchrun --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=n1:29400 t.py", "srun-per-node", {})
    assert _words(kept)[2:] == ["torchrun", "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=n1:29400", "t.py"]
    with pytest.raises(NotApplicable, match="already runs under srun"):
        rewrite("srun --ntasks-per-node=1 torchrun t.py", "srun-per-node", {})
    with pytest.raises(FixError, match="needs a value"):
        rewrite("srun -N", "srun-per-node", {})


@pytest.mark.parametrize("cmd, how", [
    ("python train.py --name 'a b' --x=\"$HOME\"", "torchrun-standalone"),
    ("torchrun --nproc_per_node 2 train.py -- --weird 'x;y'", "free-port"),
    ("python3 train.py 'quote\"d' \"sp ace\"", "accelerate-multi-gpu"),
])
def test_awkward_arguments_survive_the_round_trip(cmd, how):
    new, _ = rewrite(cmd, how, {"free_port": 30001})
    assert parse_launch(new).args == parse_launch(cmd).args
    assert shlex.split(new)[-len(parse_launch(cmd).args):] == parse_launch(cmd).args


@pytest.mark.parametrize("word, shown", [
    ("--nproc-per-node=$NGPUS", "--nproc-per-node=$NGPUS"),
    ("${OUT}/run", "${OUT}/run"),
    ("~/data/*.jsonl", "~/data/*.jsonl"),
    ("$(whoami)", '"$(whoami)"'),
    ("$OUT dir", '"$OUT dir"'),
    ("a b", "'a b'"),
    ("x;y", "'x;y'"),
    ("$x;rm", '"$x;rm"'),
    ('"$x"', "'\"$x\"'"),
])
def test_the_users_shell_words_are_left_for_the_shell(word, shown):
    from gpudoctor.engine.fixes.launch import shell_word

    assert shell_word(word) == shown
    assert shlex.split(shown) == [word]  # the same word, whatever the shell then makes of it


def test_a_rewritten_command_keeps_variables_and_globs_live():
    new, _ = rewrite("torchrun --master-port=29500 --nproc-per-node=$NGPUS train.py --out $OUT --data ~/d/*.jsonl",
                     "free-port", {"free_port": 30001})
    assert "--nproc-per-node=$NGPUS" in new.split() and "$OUT" in new.split() and "~/d/*.jsonl" in new.split()


@pytest.mark.parametrize("cmd, message", [
    ("python train.py 'unclosed", "cannot parse"),
    ("python -c 'import x'", "no script"),
    ("bash run.sh", "not a launcher"),
    ("torchrun --nproc-per-node", "needs a value"),
    ("", "no command"),
])
def test_bad_commands_are_named(cmd, message):
    with pytest.raises(FixError, match=message):
        rewrite(cmd, "torchrun-standalone", {})


def test_plan_uses_the_logs_command_and_notes_missing_cmd(catalog):
    plan = plan_fix(catalog, "D1", facts={"cmd": "python train.py", "world_size": 2})
    assert plan.fixes[0].commands == ("torchrun --standalone --nnodes=1 --nproc-per-node=2 train.py",)
    bare = plan_fix(catalog, "D1")
    assert bare.fixes == () and any("--cmd" in n for n in bare.notes)


@pytest.mark.parametrize("cmd, lead", [
    ("env NCCL_DEBUG=INFO torchrun --nproc-per-node=2 train.py", ["env", "NCCL_DEBUG=INFO"]),
    ("nohup torchrun --nproc-per-node=2 train.py", ["nohup"]),
    ("time -p torchrun --nproc-per-node=2 train.py", ["time", "-p"]),
    ("uv run torchrun --nproc-per-node=2 train.py", ["uv", "run"]),
    ("NCCL_DEBUG=INFO nohup python train.py", ["NCCL_DEBUG=INFO", "nohup"]),
])
def test_what_runs_the_launcher_is_read_past_and_kept(cmd, lead):
    """QA23 A5: `env VAR=x`, nohup, time and `uv run` in front of the launcher were 'not a launcher'."""
    launch = parse_launch(cmd)
    assert launch.lead == lead and launch.script == "train.py"
    assert launch.env == [w for w in lead if "=" in w]
    new, _notes = rewrite(cmd, "free-port", {})
    words = _words(new)
    assert " ".join(w for w in lead if "=" not in w) in " ".join(words)  # nohup, env, uv run stay
    if launch.launcher == "python":  # the new variable goes first: `nohup MASTER_PORT=1 python` would run no python
        assert words[0].startswith("MASTER_PORT=")
