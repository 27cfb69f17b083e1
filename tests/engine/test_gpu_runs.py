"""Real torch/NCCL/CUDA output from failures made on a GPU machine (tests/data/gpu_runs, bench/gpu/run.sh): the
diagnosis names what each run did wrong, and gives no confident match where the run shows no known cause."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

RUNS = Path(__file__).resolve().parent.parent / "data" / "gpu_runs"
MANIFEST = yaml.safe_load((RUNS / "manifest.yaml").read_text(encoding="utf-8"))


def diagnose(path: Path) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", "--json", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_every_run_is_listed():
    listed = {row["path"] for row in MANIFEST}
    present = {p.name for p in RUNS.iterdir() if p.name != "manifest.yaml"}
    assert listed == present


@pytest.mark.parametrize("row", MANIFEST, ids=[row["path"] for row in MANIFEST])
def test_real_run(row):
    code, data = diagnose(RUNS / row["path"])
    matches = [f["id"] for f in data["findings"] if f["tier"] == "match"]
    if row["expect"] is None:
        assert matches == [] and code == 1, matches
    else:
        assert matches[:1] == [row["expect"]] and code == 0, matches
    named = {f["id"] for f in data["findings"]}
    assert not named & set(row.get("not", ())), [f for f in data["findings"] if f["id"] in row.get("not", ())]


def test_torch_shutdown_warning_is_no_lost_peer():
    # torch 2.7+ prints this after any rank's crash; its link ends in "#shutdown", which is not a peer going away
    from gpudoctor.engine.ranks import classify

    line = ("[rank0]:[W1128 07:51:39.638901439 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() "
            "was not called before program exit, which can leak resources. For more info, please see "
            "https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())")
    assert classify(line) == "crash"
    assert classify("[PG 0 Rank 1] ProcessGroupNCCL aborted its communicators") == "lost-peer"


@pytest.mark.parametrize("text, one", [
    ("x:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0", True),
    ("x:1:1 [0] NCCL INFO ncclCommInitRankConfig comm 0x1 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60", True),
    ("x:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 1 cudaDev 0\nx:1:1 [0] NCCL INFO comm 0x2 rank 3 nranks 8 cudaDev 3",
     False),
    ("a log without NCCL's init lines", False),
])
def test_world_of_one(text, one):
    from gpudoctor.engine.nccl_rules import world_of_one

    assert world_of_one(text) is one


SUMMARY = """torch.AcceleratorError: CUDA error: invalid device ordinal
Root Cause (first observed failure):
[0]:
  time      : 2026-11-28_07:48:44
  host      : node-{host}
  rank      : {rank} (local_rank: {local})
  exitcode  : 1 (pid: 767)
"""


@pytest.mark.parametrize("rank, local, d27", [(1, 1, True), (9, 1, False), (0, 0, False)])
def test_failed_rank_equal_to_its_local_rank_is_too_many_ranks(rank, local, d27):
    from gpudoctor.engine.ordinal_rules import failed_local_rank_rule

    verdicts = failed_local_rank_rule(SUMMARY.format(host=1, rank=rank, local=local), "f.log")
    assert [(v.entry, v.rule_out) for v in verdicts] == ([("D3", True), ("D27", False)] if d27 else [])


def test_torch_2_11s_own_flight_recorder_dump_is_read():
    # written by the NCCL watchdog on the H200 (TORCH_NCCL_DUMP_ON_TIMEOUT=1): format 2.10, one rank
    _, data = diagnose(RUNS / "stuck-kernel-dir")
    assert [i["kind"] for i in data["inputs"]].count("flight") == 1
    progress = data["flight"]["progress"]
    assert progress[0]["last_enqueued_op"] == "all_reduce" and progress[0]["last_completed"] == -1
