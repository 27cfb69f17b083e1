"""D21's rewrite recognises the rank gates lint recognises (QA23 A4): the environment's RANK, the `in [-1, 0]` idiom,
and says what to do by hand for a collective under `if rank != 0:`."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.ranks import collective_out_of_rank_branch

SCRIPT = """import os
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
for epoch in range(3):
    loss = torch.ones(1)
    if {gate}:
        dist.all_reduce(loss)
        print(loss)
"""


@pytest.mark.parametrize("gate", [
    'int(os.environ["RANK"]) == 0',
    'os.environ.get("LOCAL_RANK") == "0"',
    "args.local_rank in [-1, 0]",
    "local_rank in (0, -1)",
    "dist.get_rank() == 0",
])
def test_each_rank_zero_gate_is_rewritten(gate):
    new, _notes = collective_out_of_rank_branch(SCRIPT.format(gate=gate), "t.py", {})
    compile(new, "t.py", "exec")
    lines = new.splitlines()
    reduce_at = next(i for i, line in enumerate(lines) if "all_reduce" in line)
    gate_at = next(i for i, line in enumerate(lines) if line.strip().startswith("if "))
    assert reduce_at < gate_at and lines[reduce_at].startswith("    dist.all_reduce")  # out of the branch


@pytest.mark.parametrize("gate", ["local_rank in [0, 1]", "rank == 1"])
def test_a_gate_that_is_not_rank_zero_is_left_alone(gate):
    with pytest.raises(NotApplicable, match="no collective"):
        collective_out_of_rank_branch(SCRIPT.format(gate=gate), "t.py", {})


def test_a_collective_only_the_other_ranks_run_is_named_with_what_to_do():
    with pytest.raises(NotApplicable, match=r"dist\.all_reduce runs only under `if rank != 0:`.*by hand"):
        collective_out_of_rank_branch(SCRIPT.format(gate="rank != 0"), "t.py", {})
