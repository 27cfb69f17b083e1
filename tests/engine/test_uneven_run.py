"""A real uneven-shards run under torchrun (gloo, CPU): the rank with fewer batches ends cleanly, its peer loses the
connection inside the DDP backward, and torchrun names that one rank with no other failure: D9 (QA23 A13)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from rule_helpers import matches, run

TRAIN = textwrap.dedent("""\
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 2))
    samples = list(zip(torch.randn(65, 8), torch.randint(0, 2, (65,))))
    loader = DataLoader(samples[rank::world], batch_size=8)  # 33 samples on rank 0, 32 on rank 1: one batch more
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()
    """)


def test_the_rank_left_with_a_batch_more_names_d9(tmp_path, catalog):
    (tmp_path / "train.py").write_text(TRAIN)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    assert done.returncode != 0 and "Root Cause" in log, log[-3000:]  # the other rank: none, or the agent's SIGTERM
    d = run(catalog, log)
    assert matches(d)[:1] == ["D9"], [(f.id, f.tier) for f in d.findings]
    assert any("no other rank failed" in ev.text for ev in d.findings[0].evidence)


SUMMARY = """[rank0]:   File "/work/train.py", line 28, in main
[rank0]:     loss.backward()
[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:937
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
{others}
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-28_22:04:15
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 8652)
  error_file: <N/A>
============================================================
"""
TERMINATED = """[1]:
  time      : 2026-11-28_22:04:15
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 8653)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 8653"""
KILLED = """[1]:
  time      : 2026-11-28_22:04:14
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 8653)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 8653"""


def test_a_peer_that_failed_too_is_no_clean_exit(catalog):
    assert "D9" in matches(run(catalog, SUMMARY.format(others="  <NO_OTHER_FAILURES>")))
    assert "D9" in matches(run(catalog, SUMMARY.format(others=TERMINATED)))  # torchrun's own teardown of the peer
    assert "D9" not in matches(run(catalog, SUMMARY.format(others=KILLED)))


def test_a_rank_s_own_error_is_a_crash_not_a_clean_exit(catalog):
    """The README's example: rank 2 ran out of memory and torchrun names it alone; the others' lost peer is D20's."""
    oom = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert "D9" not in matches(run(catalog, oom + SUMMARY.format(others="  <NO_OTHER_FAILURES>")))


def test_a_peer_that_aborted_in_its_teardown_after_its_loop_is_a_clean_end(catalog):
    """The run's third ending: rank 1 ran out of batches and aborted while its gloo threads shut down (torchrun's
    root cause, SIGABRT, no error of its own); rank 0 lost it inside backward and was stopped by the agent."""
    log = ("terminate called without an active exception\n" + SUMMARY.splitlines()[0] + "\n"
           + "\n".join(SUMMARY.splitlines()[1:3]) + "\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\nFailures:\n[1]:\n"
           "  time      : 2026-11-28_23:59:25\n  host      : localhost\n  rank      : 0 (local_rank: 0)\n"
           "  exitcode  : -15 (pid: 11163)  (SIGTERM)\n------\nRoot Cause (first observed failure):\n[0]:\n"
           "  time      : 2026-11-28_23:59:25\n  host      : localhost\n  rank      : 1 (local_rank: 1)\n"
           "  exitcode  : -6 (pid: 11164)  (SIGABRT)\n")
    assert matches(run(catalog, log))[:1] == ["D9"]
    assert "D9" not in matches(run(catalog, log.replace("terminate called without an active exception\n", "")))


END_BARRIER = textwrap.dedent("""\
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    if rank == 0:
        print("saved final checkpoint", flush=True)
        dist.barrier()
    print("training finished", flush=True)
    dist.destroy_process_group()
    """)


def test_a_barrier_only_rank_0_reaches_after_the_loop_is_guessed_d21_and_the_script_confirms_it(tmp_path, catalog):
    """QA24 R5: rank 1 finishes cleanly while rank 0 waits in a barrier of an `if rank == 0:` branch and loses it.
    The guesses were D20/D28/D1, and "Which rank?" said the rank that finished had likely hung."""
    from gpudoctor.engine.corroborate import corroborate, gather

    (tmp_path / "train.py").write_text(END_BARRIER)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    assert done.returncode != 0 and "in barrier" in log, log[-3000:]
    d = run(catalog, log)
    assert not matches(d) and [f.id for f in d.findings][:1] == ["D21"], [(f.id, f.tier) for f in d.findings]
    assert not any("hung" in line for line in d.verdict)
    witnesses, _ = gather(script=str(tmp_path / "train.py"))
    confirmed = corroborate(d, witnesses, catalog)
    assert matches(confirmed)[:1] == ["D21"]
    assert any(ev.file.endswith("train.py") and ev.line == 17 for ev in confirmed.findings[0].evidence)


NAN_SKIP = textwrap.dedent("""\
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        loss = model(torch.ones(2, 4)).sum()
        if rank == 1 and step == 1:
            loss = loss * float("nan")
        if torch.isnan(loss):
            print(f"step {step}: loss is NaN, skipping this batch", flush=True)
            continue
        loss.backward()
        opt.step()
    dist.destroy_process_group()
    """)


def _names_d20_not_d9(d, skip_text: str) -> None:
    assert matches(d)[:1] == ["D20"], [(f.id, f.tier) for f in d.findings]
    assert "D9" not in matches(d)
    assert skip_text in d.findings[0].evidence[0].text
    assert any("skipped a step on a non-finite loss" in note for note in d.notes), d.notes


def test_a_rank_that_skipped_a_nan_step_and_ended_first_names_d20_not_d9(tmp_path, catalog):
    """QA24 R13: with a rank-local NaN skip, the skipping rank runs one all-reduce fewer and ends cleanly while its
    peer waits in the step it skipped: the same torchrun ending as uneven shards, read D9. Its own skip line tells
    it apart."""
    (tmp_path / "train.py").write_text(NAN_SKIP)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    log = done.stdout + done.stderr
    assert done.returncode != 0 and "Root Cause" in log, log[-3000:]
    _names_d20_not_d9(run(catalog, log), "loss is NaN, skipping this batch")


def test_the_kept_nan_skip_run_names_d20(catalog):
    from pathlib import Path

    log = (Path(__file__).resolve().parents[1] / "data" / "runs" / "nan-skip-on-one-rank.log").read_text()
    _names_d20_not_d9(run(catalog, log), "rank 1: step 2: loss is nan, skipping batch")
    # without the skip line the same ending is the uneven shards' (D9)
    bare = "\n".join(line for line in log.splitlines() if "skipping" not in line)
    assert matches(run(catalog, bare))[:1] == ["D9"]
