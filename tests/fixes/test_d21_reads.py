"""D21's hoist carries every line the collective reads from, however far back the chain goes: the patched
function runs on every rank (executed here against stand-ins for torch and torch.distributed)."""
from __future__ import annotations

import types

import pytest

from gpudoctor.engine.fixes.patches.ranks import collective_out_of_rank_branch

SCRIPT = '''import torch, torch.distributed as dist
def evaluate(model, rank):
    if rank == 0:
        acc = model.eval_acc()
        scale = 1.0 / dist.get_world_size()
        t = torch.tensor([acc * scale])
        dist.all_reduce(t)
        print("acc", t.item())
        return t.item()
'''


class _Tensor:
    def __init__(self, values):
        self.values = list(values)

    def item(self):
        return self.values[0]


def _run(code: str, rank: int, calls: list) -> object:
    torch = types.SimpleNamespace(tensor=_Tensor)
    dist = types.SimpleNamespace(get_world_size=lambda: 2, all_reduce=lambda t: calls.append(("all_reduce", rank)))
    namespace = {"__name__": "patched"}
    exec(compile(code.replace("import torch, torch.distributed as dist\n", ""), "patched.py", "exec"),
         {**namespace, "torch": torch, "dist": dist, "print": lambda *a: None}, namespace)
    model = types.SimpleNamespace(eval_acc=lambda: 0.5)
    return namespace["evaluate"](model, rank)


def test_the_patched_function_runs_on_every_rank_and_each_one_reduces():
    new, notes = collective_out_of_rank_branch(SCRIPT, "eval.py", {})
    calls: list = []
    assert _run(new, 0, calls) == pytest.approx(0.25)
    assert _run(new, 1, calls) is None  # rank 1 takes part and returns nothing, as before
    assert calls == [("all_reduce", 0), ("all_reduce", 1)]
    assert sum("also moved what the collective reads" in n for n in notes) == 3
    body = new.split("if rank == 0:")
    assert "acc = model.eval_acc()" in body[0] and "print(" in body[1]  # only the print stays on rank 0
