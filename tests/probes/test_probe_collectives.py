"""The collectives probe with real gloo groups (2 and 4 ranks, and under torchrun), and its arithmetic."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpudoctor.probes import linkspeed, registry, runner, sweep
from gpudoctor.probes.base import Status

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check_table(result, nproc: int, largest: int) -> None:
    rows = result.figures["table"]
    assert rows[0]["bytes"] == 8 and rows[-1]["bytes"] == largest
    for row in rows:  # nccl-tests: busbw = algbw * 2(n-1)/n, algbw = bytes / time
        assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 2 * (nproc - 1) / nproc)
        assert row["algbw_gbs"] == pytest.approx(row["bytes"] / (row["time_us"] * 1e-6) / 1e9)
    assert "all_reduce and all_gather results correct on every rank" in result.evidence
    assert sum(line.startswith("rank ") for line in result.evidence) == nproc


def test_four_local_gloo_ranks():
    result = runner.run_probe(registry.get("collectives"), {"nproc": 4, "max_bytes": 1 << 20})
    assert result.status is Status.RULED_OUT, result
    assert "on 4 gloo ranks" in result.summary
    assert f"slowest rank {result.figures['straggler']['rank']}" in result.summary
    check_table(result, 4, 1 << 20)


def test_two_local_gloo_ranks_name_the_late_one():
    # rank 1 sleeps 60 ms in every timed round: the barrier must name it, and the sweep must still be sound
    options = {"nproc": 2, "max_bytes": 1 << 20, "delay_rank": 1, "delay_s": 0.06}
    result = runner.run_probe(registry.get("collectives"), options)
    assert result.status is Status.CONFIRMED, result
    assert "rank 1 on" in result.summary and "straggler" in result.summary and "D20" in result.entries
    assert result.figures["straggler"]["rank"] == 1 and result.figures["straggler"]["lag_s"] > 0.04
    check_table(result, 2, 1 << 20)


def test_under_torchrun_every_rank_runs_and_rank_0_prints_one_report(tmp_path):
    # TMPDIR: torchrun leaves a torchelastic_* log folder behind; keep it in the test's own temp dir
    env = dict(os.environ, NO_COLOR="1", COLUMNS="80", TMPDIR=str(tmp_path))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "gpudoctor", "probe", "collectives", "--max-size", "64K", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)  # exactly one JSON document: the other rank printed nothing
    assert data["world_size"] == 2 and data["missing_ranks"] == []
    result = data["results"][0]
    assert result["status"] == "ruled_out", result
    pids = {line.split(" pid ")[1].split(",")[0] for line in result["evidence"] if line.startswith("rank ")}
    assert len(pids) == 2  # both ranks reported their own figures to rank 0


def stats(rank, sweep_rows, **extra):
    return {"rank": rank, "host": "h", "pid": 100 + rank, "init_s": 0.1, "correct": True,
            "ranks_seen": [0, 1], "sweep": sweep_rows, **extra}


def test_large_messages_failing_after_small_ones_point_at_the_mtu():
    ok = [[8, 1e-4], [8192, 2e-4]]
    gathered = [stats(0, ok, failed_at=1 << 20, error="sweep at 1 MiB: RuntimeError: timed out"),
                stats(1, ok, failed_at=1 << 20, error="sweep at 1 MiB: RuntimeError: timed out")]
    result = sweep.analyse(gathered, 2, "gloo", {}, None, "", False, multi_node=True)
    assert result.status is Status.CONFIRMED and "MN4" in result.entries
    assert "passes up to 8 KiB but fails at 1 MiB" in result.summary


def test_a_rank_that_died_is_named_with_its_signal():
    gathered = [stats(0, [[8, 1e-4]], error="correctness: RuntimeError: Connection closed by peer",
                      stage="correctness"), None]
    result = sweep.analyse(gathered, 2, "gloo", {1: "SIGKILL"}, None, "", False, multi_node=False)
    assert result.status is Status.CONFIRMED
    assert result.summary.startswith("rank 1 never reported (it died: SIGKILL)")


def test_busbw_far_below_the_link_is_confirmed_and_a_healthy_one_is_normal():
    size = 64 << 20
    slow = [stats(r, [[size, size / 0.5e9]], compute_s=0.01, barrier_wait_s=0.001) for r in (0, 1)]
    link = linkspeed.Link("ens5 at 100 Gb/s", 12.5)
    result = sweep.analyse(slow, 2, "nccl", {}, link, "", False, multi_node=True)
    assert result.status is Status.CONFIRMED and result.entries == ("MN2",)
    assert "4% of ens5 at 100 Gb/s" in result.summary
    fast = [stats(r, [[size, size / 11e9]], compute_s=0.01, barrier_wait_s=0.001) for r in (0, 1)]
    result = sweep.analyse(fast, 2, "nccl", {}, link, "", False, multi_node=True)
    assert result.status is Status.RULED_OUT and any("normal" in line for line in result.evidence)


def test_sizes_follow_nccl_tests():
    assert sweep.message_sizes(256 << 20, gpu=True)[:3] == [8, 16, 32]
    assert sweep.message_sizes(256 << 20, gpu=True)[-1] == 256 << 20
    assert sweep.message_sizes(4 << 20, gpu=False) == [8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288,
                                                       2097152, 4194304]
    assert sweep.bus_factor(8) == pytest.approx(1.75)
    assert linkspeed.parse_nvlink_status("GPU 0: H100\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n"
                                         "\t Link 2: <inactive>\n") == pytest.approx(53.124)


@pytest.mark.parametrize("wanted, gpus, nccl, ranks_here, expect", [
    (None, 8, True, 8, "nccl"),     # one GPU per rank
    (None, 1, True, 1, "nccl"),     # a single rank on a single GPU
    (None, 1, True, 2, "gloo"),     # two ranks, one GPU: nccl would refuse the duplicate GPU
    (None, 4, True, 8, "gloo"),
    (None, 0, False, 2, "gloo"),    # no GPU at all
    (None, 2, False, 2, "gloo"),    # GPUs but a torch without NCCL
    ("gloo", 8, True, 8, "gloo"),   # asked for
    ("nccl", 8, True, 8, "nccl"),
])
def test_pick_backend_gives_each_rank_a_gpu_or_uses_gloo(wanted, gpus, nccl, ranks_here, expect):
    from gpudoctor.probes.collectives import pick_backend

    assert pick_backend(wanted, gpus, nccl, ranks_here) == (expect, None)


@pytest.mark.parametrize("gpus, nccl, ranks_here, words", [
    (1, True, 2, "2 ranks on this node need 2 GPUs with nccl; 1 visible"),
    (0, False, 2, "NCCL or GPUs are unavailable"),
])
def test_pick_backend_refuses_nccl_it_cannot_give(gpus, nccl, ranks_here, words):
    from gpudoctor.probes.collectives import pick_backend

    backend, why = pick_backend("nccl", gpus, nccl, ranks_here)
    assert backend == "" and words in why


@pytest.mark.parametrize("multi_node, entries", [(False, ()), (True, ("MN2",))])
def test_a_rank_that_never_joined_is_no_crash_and_on_one_host_no_nic(multi_node, entries):
    """QA23 B2: rank 1 was never started; rank 0's group never formed. Nothing died (no D20) and on one host no
    interface was chosen (no MN2): the report says the rank never joined."""
    gathered = [stats(0, [], error="init: DistStoreError: wait timeout after 30000ms, keys: /rank1", stage="init"),
                None]
    result = sweep.analyse(gathered, 2, "gloo", {}, None, "", False, multi_node=multi_node)
    assert result.status is Status.CONFIRMED and result.entries == entries
    assert "rank 1 never joined" in result.summary and "MASTER_ADDR:MASTER_PORT" in result.summary
