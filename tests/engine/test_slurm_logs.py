"""Logs of jobs srun started: its report of tasks that died names the rank that failed first, when each task is a rank."""
from __future__ import annotations

import io

import pytest

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.ranks import _task_ids
from gpudoctor.engine.sources import Source
from gpudoctor.kb.catalog import load_catalog

WATCHDOG = ("[rank{r}]:[E1122 02:31:53.377000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1204, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for "
            "600023 milliseconds before timing out.")


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_cache=False)


def run(catalog, lines: list[str]):
    return diagnose(catalog, [Source("<stdin>", None, None)], stdin=io.BytesIO(("\n".join(lines) + "\n").encode()))


def _ranks(result) -> dict[int, str]:
    return {r.rank: r.status for r in result.ranks}


def test_a_task_srun_says_ran_out_of_memory_is_the_rank_that_failed_first(catalog):
    lines = [WATCHDOG.format(r=r) for r in (0, 1, 3)] + [
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.0. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.",
        "srun: error: gpu-node-07: task 2: Out Of Memory",
        "srun: error: gpu-node-07: tasks 0-1,3: Aborted (core dumped)",
    ]
    result = run(catalog, lines)
    assert [f.id for f in result.findings if f.tier == "match"][:1] == ["D28"]  # the cgroup's OOM killer
    assert _ranks(result)[2] == "died" and {_ranks(result)[r] for r in (0, 1, 3)} == {"waiting"}
    assert result.verdict[0].startswith("rank 2 failed first: srun: error: gpu-node-07: task 2: Out Of Memory")


def test_an_exit_code_is_not_a_death_and_torchrun_tasks_are_not_ranks(catalog):
    gave_up = [WATCHDOG.format(r=r) for r in (0, 1)] + ["srun: error: node-1: task 1: Exited with exit code 1"]
    assert _ranks(run(catalog, gave_up)).get(1) != "died"
    under_torchrun = [WATCHDOG.format(r=r) for r in (0, 1)] + [
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-11-22_02:31:55",
        "  host      : node-0",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -6 (pid: 4242)",
        "srun: error: node-1: task 1: Killed",  # task 1 is node 1's torchrun agent, not rank 1
    ]
    assert _ranks(run(catalog, under_torchrun)).get(1) != "died"


def test_slurm_task_lists():
    assert _task_ids("0-3,7") == [0, 1, 2, 3, 7] and _task_ids("5") == [5]
    assert _task_ids("x,2-") == [] and len(_task_ids("0-99999")) == 1024
    assert _task_ids("[0-1]") == []  # a bracketed host-list form is not srun's task list
