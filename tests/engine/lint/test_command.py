"""Checks of a launch command: the launcher settings that are a catalogue cause on their face, and only those."""
from __future__ import annotations

import json

import pytest

from gpudoctor.engine.fixes.errors import FixError
from gpudoctor.engine.lint.command import COMMAND, check_command


def rules(cmd: str) -> list[tuple[str, str]]:
    return [(f.entry_id, f.rule) for f in check_command(cmd)]


@pytest.mark.parametrize("cmd, expected", [
    ("torchrun --standalone --nnodes=2 --nproc-per-node=8 train.py", [("D2", "standalone-multinode")]),
    ("torchrun --nnodes 1:4 --rdzv-endpoint=127.0.0.1:29400 train.py", [("D2", "local-rendezvous-multinode")]),
    ("MASTER_ADDR=localhost torchrun --nnodes=2 --nproc-per-node=8 train.py", [("D2", "local-rendezvous-multinode")]),
    ("python -m torch.distributed.launch --nnodes 2 --nproc_per_node=4 train.py",
     [("D2", "multinode-without-rendezvous")]),
    ("accelerate launch --num_processes 1 train.py", [("D5", "accelerate-one-process")]),
    ("accelerate launch --num-processes=1 train.py", [("D5", "accelerate-one-process")]),
    ("deepspeed --num_nodes 2 --num_gpus 8 train.py --deepspeed ds.json", [("D6", "deepspeed-nodes-without-hostfile")]),
    ("CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc-per-node=4 train.py", [("D27", "more-ranks-than-visible-gpus")]),
    ("python train.py --epochs 3", [("D1", "no-launcher"), ("D5", "no-launcher")]),
    # Swin Transformer #158: --use_env, so the launcher passes no --local_rank and every worker reads the literal 0
    ("python -m torch.distributed.launch --nproc_per_node=4 --use_env --master_port 12345 main.py --local_rank 0",
     [("D3", "literal-local-rank")]),
    ("torchrun --nproc-per-node=8 train.py --cfg a.yaml --local-rank=0", [("D3", "literal-local-rank")]),
])
def test_a_command_with_the_bug_is_flagged(cmd, expected):
    assert rules(cmd) == expected
    assert all(f.path == COMMAND and f.line == 1 for f in check_command(cmd))


@pytest.mark.parametrize("cmd", [
    "torchrun --standalone --nproc-per-node=8 train.py",  # one node: standalone is right
    # torch.distributed.launch without --use_env appends --local_rank=i after it, and argparse keeps the last
    "python -m torch.distributed.launch --nproc_per_node=4 main.py --local_rank 0",
    "torchrun train.py --local_rank 0",  # torchrun's default is one process per node
    "torchrun --nproc-per-node=8 train.py --local_rank $LOCAL_RANK",
    "torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29400 train.py",
    "MASTER_ADDR=10.0.0.1 torchrun --nnodes=2 --nproc-per-node=8 train.py",
    "accelerate launch --num_processes 8 train.py",
    "accelerate launch train.py",  # the config file decides; nothing on the command's face
    "deepspeed --hostfile hosts --num_nodes 2 train.py",
    "deepspeed --num_gpus 8 train.py",
    "CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc-per-node=4 train.py",
    "srun python train.py",  # srun starts one task per GPU and sets SLURM's variables
    "python -m my_launcher train.py",
])
def test_a_sound_command_is_not_flagged(cmd):
    assert rules(cmd) == []


def test_an_unparsable_command_says_why():
    with pytest.raises(FixError, match="cannot parse"):
        check_command("torchrun 'unclosed")


def test_lint_cmd_through_the_cli(cli_proc):
    r = cli_proc("lint", "--cmd", "CUDA_VISIBLE_DEVICES=0,1 torchrun --standalone --nnodes=2 --nproc-per-node=4 x.py")
    assert r.code == 1, r.err
    assert "D2 error [standalone-multinode]" in r.out and "D27 error [more-ranks-than-visible-gpus]" in r.out
    assert "2 findings (2 errors) in the launch command" in r.out
    assert all(len(line) <= 80 for line in r.out.splitlines())
    r = cli_proc("lint", "--cmd", "torchrun --nnodes=2 --rdzv-endpoint=10.0.0.1:29400 x.py", "--json")
    assert r.code == 0 and json.loads(r.out)["findings"] == []
    r = cli_proc("lint", "--cmd", "torchrun --standalone --nnodes=2 x.py", "--ignore", "D2")
    assert r.code == 0, r.out
    r = cli_proc("lint", "--cmd", "torchrun 'x", "--json")
    assert r.code == 2 and "cannot parse the command" in r.err and "Traceback" not in r.err
    r = cli_proc("lint", "--cmd", "torchrun --standalone --nnodes=2 x.py", "--format", "sarif")
    assert r.code == 2 and "SARIF" in r.err


def test_diagnose_cmd_confirms_the_rendezvous_guess(cli_proc, tmp_path):
    log = tmp_path / "node0.log"
    log.write_text("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. "
                   "1/2 clients joined.\n")
    alone = json.loads(cli_proc("diagnose", str(log), "--json").out)
    assert "D2" in [f["id"] for f in alone["findings"]] and alone["findings"][0]["id"] != "D2"
    r = cli_proc("diagnose", str(log), "--json", "--cmd", "torchrun --standalone --nnodes=2 --nproc-per-node=8 x.py")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    top = doc["findings"][0]
    assert (top["id"], top["tier"]) == ("D2", "match")
    assert top["evidence"][0] == {"file": "launch command", "line": 0, "signature": "command:standalone-multinode",
                                  "text": "torchrun --standalone --nnodes=2 --nproc-per-node=8 x.py"}
    assert doc["fix"]["entry"] == "D2"


def test_lint_cmd_runs_the_restart_check_on_the_script_it_names(cli_proc, tmp_path):
    """torchrun --max-restarts with the training script at hand: MN5 when it loads no checkpoint, as the same
    command in a .sh file gets (QA23 L2); nothing when it resumes, or when the script is not here to read."""
    fresh = tmp_path / "train.py"
    fresh.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\nfor step in range(9):\n"
                     "    pass\n")
    resumes = tmp_path / "resume.py"
    resumes.write_text(fresh.read_text() + "state = torch.load('last.pt')\n")
    cmd = "torchrun --max-restarts=3 --standalone --nproc-per-node=2 {}"
    r = cli_proc("lint", str(fresh), "--cmd", cmd.format("train.py"), "--json")
    found = [(f["entry_id"], f["path"]) for f in json.loads(r.out)["findings"]]
    assert ("MN5", COMMAND) in found and r.code == 1
    shell = tmp_path / "run.sh"
    shell.write_text(cmd.format("train.py") + "\n")
    assert "MN5" in {f["entry_id"] for f in json.loads(cli_proc("lint", str(shell), "--json").out)["findings"]}
    r = cli_proc("lint", str(resumes), "--cmd", cmd.format("resume.py"), "--json", "--select", "MN5")
    assert r.code == 0 and json.loads(r.out)["findings"] == []
    r = cli_proc("lint", "--cmd", cmd.format("elsewhere.py"), "--json")
    assert r.code == 0 and json.loads(r.out)["findings"] == []
    assert check_command(cmd.format("train.py"), lambda name: fresh.read_text() if name == "train.py" else None)
    assert rules(cmd.format("train.py")) == []  # no reader: the script is not consulted
