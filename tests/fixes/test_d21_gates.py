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


SAVE_BEST = """import torch
import torch.distributed as dist


def evaluate(model):
    t = torch.tensor([model.score])
    dist.all_reduce(t)
    return t.item()


def train(model, steps, rank, best=0.0):
    for step in range(steps):
        if rank == 0 and step % 10 == 0:
            if evaluate(model) > best:
                torch.save(model, "best.pt")
"""


def test_a_collective_in_the_condition_of_a_gated_save_is_hoisted_and_the_save_stays_on_rank_0():
    """QA23 A14: the whole `if evaluate(model) > best: torch.save(...)` moved out of the gate, so every rank saved."""
    import types

    new, _notes = collective_out_of_rank_branch(SAVE_BEST, "t.py", {})
    events: list = []

    class Tensor:
        def __init__(self, values):
            self.values = values

        def item(self):
            return self.values[0]

    for rank in (0, 1):
        torch = types.SimpleNamespace(tensor=Tensor, save=lambda obj, path, rank=rank: events.append(("save", rank)))
        dist = types.SimpleNamespace(all_reduce=lambda t, rank=rank: events.append(("all_reduce", rank)))
        space = {"torch": torch, "dist": dist}
        exec(compile(new.replace("import torch\nimport torch.distributed as dist\n", ""), "t.py", "exec"), space)
        space["train"](types.SimpleNamespace(score=1.0), 20, rank)
    assert events.count(("all_reduce", 0)) == events.count(("all_reduce", 1)) == 2  # steps 0 and 10, every rank
    assert ("save", 1) not in events and events.count(("save", 0)) == 2


def test_a_moved_statement_that_writes_makes_the_fix_unsafe(tmp_path):
    """A collective deep inside a gated block that also saves: the block can only move whole, so every rank would
    save too; the plan marks that fix unsafe (written only with --unsafe) and says why."""
    from gpudoctor.engine.fixes import plan_fix
    from gpudoctor.kb.catalog import load_catalog

    script = tmp_path / "t.py"
    script.write_text(SAVE_BEST.replace(
        "            if evaluate(model) > best:\n                torch.save(model, \"best.pt\")\n",
        "            for _ in range(1):\n                evaluate(model)\n                torch.save(model, \"best.pt\")\n"))
    plan = plan_fix(load_catalog(), "D21", script=str(script))
    [fix] = [f for f in plan.fixes if f.action_id == "collective-out-of-rank-branch"]
    assert fix.safety == "unsafe" and "prints or writes" in fix.why
    assert not any(n.startswith("unsafe: ") for n in fix.notes)


ONE_LINE = 'import torch, torch.distributed as dist\ndist.init_process_group("gloo")\nrank = dist.get_rank()\n'


@pytest.mark.parametrize("source, expected", [
    # QA24 R10: the one-line body crashed the planner (exit 3), in the CLI, the TUI and diagnose --script
    ("if dist.get_rank() == 0: dist.barrier()\n", "dist.barrier()\n"),
    # ... and inside a loop, with the save on the same line, it previewed a [safe] diff that was not Python
    ("for step in range(3):\n    if rank == 0: torch.save({}, 'm.pt'); dist.barrier()\nprint('done')\n",
     "for step in range(3):\n    if rank == 0:\n        torch.save({}, 'm.pt')\n    dist.barrier()\nprint('done')\n"),
    # a save and the barrier on one line inside an indented branch: the save stays on rank 0
    ("if rank == 0:\n    torch.save({}, 'ckpt.pt'); dist.barrier()\n",
     "if rank == 0:\n    torch.save({}, 'ckpt.pt')\ndist.barrier()\n"),
])
def test_one_line_branches_and_shared_lines_are_split_before_the_collective_moves(source, expected):
    import ast

    after, notes = collective_out_of_rank_branch(ONE_LINE + source, "t.py", {})
    ast.parse(after)
    assert after == ONE_LINE + expected
    assert not any(n.startswith("unsafe") for n in notes)


@pytest.mark.parametrize("source", [
    # QA24 R19: a barrier paired with the else branch's, and Hugging Face's download-on-rank-0-first pair, are correct
    # code that lint calls clean; the "safe" rewrite turned them into a deadlock
    "if rank == 0:\n    print('saving')\n    dist.barrier()\nelse:\n    dist.barrier()\nprint('done', rank)\n",
    "if rank not in [-1, 0]:\n    dist.barrier()  # only the first process downloads\nmodel = 'load'\n"
    "if rank == 0:\n    dist.barrier()\n",
])
def test_a_paired_barrier_is_left_alone(source):
    from gpudoctor.engine.lint import lint_source

    assert not lint_source(ONE_LINE + source, "t.py", select=["D21"]).findings
    with pytest.raises(NotApplicable, match="met by the other ranks"):
        collective_out_of_rank_branch(ONE_LINE + source, "t.py", {})
