"""QA24 R9/R11: the D20, P5 and D26 planners on `a; b` lines and one-line `if` bodies, the way people write short
scripts. Each patched script is run for real on two gloo ranks (see test_behaviour.run_ranks): before the fix it
fails the way the entry says, after it both ranks finish, and the patched text is the one the planner previews."""
from __future__ import annotations

import ast
import re

import pytest

pytest.importorskip("torch")

from test_behaviour import run_ranks  # noqa: E402  (the runner after the skip)

from gpudoctor.engine.fixes.patches import get  # noqa: E402
from gpudoctor.engine.lint import lint_source  # noqa: E402

HEAD = """import datetime
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=4))
rank = dist.get_rank()
"""

# rank 1's loss is NaN at step 1; the backward and the step share one line
D20_SEMICOLONS = HEAD + """model = DDP(torch.nn.Linear(4, 1)); opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.ones(2, 4)).sum()
    if rank == 1 and step == 1: loss = loss * float("nan")
    if torch.isnan(loss): continue  # skip the bad batch
    loss.backward(); opt.step()
print("finished on rank", rank, flush=True)
dist.destroy_process_group()
"""

P5_SEMICOLON = HEAD + """torch.manual_seed(rank)
model = torch.nn.Linear(4, 1)
model = DDP(model); model.module.reset_parameters()
print("weight", [round(v, 6) for v in model.module.weight.flatten().tolist()], flush=True)
dist.destroy_process_group()
"""

D26_ONE_LINE_IF = HEAD + """model = torch.nn.Sequential(torch.nn.Linear(4, 4))
if rank == 0: model.add_module("head", torch.nn.Linear(4, 2)); print("head added", flush=True)
model = DDP(model)
model(torch.ones(2, 4)).sum().backward()
print("trained on rank", rank, flush=True)
dist.destroy_process_group()
"""

D26_LAZY_SAME_LINE = HEAD + """model = torch.nn.Sequential(torch.nn.LazyLinear(2)); model = DDP(model)
model(torch.ones(2, 4)).sum().backward()
print("trained on rank", rank, flush=True)
dist.destroy_process_group()
"""


def _patched(tmp_path, action: str, text: str, facts: dict | None = None) -> tuple[str, str]:
    after, notes = get(action)(text, str(tmp_path / "train.py"), facts or {})
    ast.parse(after)  # the preview is Python
    return after, " ".join(notes)


def test_d20_skip_in_a_loop_whose_backward_shares_a_line_is_decided_for_all_ranks(tmp_path):
    assert [f.entry_id for f in lint_source(D20_SEMICOLONS, "train.py", select=["D20"]).findings] == ["D20"]
    script = tmp_path / "train.py"
    script.write_text(D20_SEMICOLONS)
    codes, outs, _ = run_ranks(script)
    assert codes != [0, 0], outs  # rank 1 skips a backward the other all-reduces: the group times out
    after, notes = _patched(tmp_path, "collective-skip", D20_SEMICOLONS)
    assert "torch.isnan(loss)" in notes
    assert "    loss.backward()\n    opt.step()\n" in after  # split, so the loop maps one statement per line
    assert "opt.step()\n" in after.split("dist.all_reduce(skip_step")[1]
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    assert "finished on rank 0" in outs[0] and "finished on rank 1" in outs[1]
    assert not lint_source(after, "train.py", select=["D20"]).findings


def test_p5_init_sharing_a_line_with_the_wrap_moves_before_it_and_the_ranks_agree(tmp_path):
    assert [f.entry_id for f in lint_source(P5_SEMICOLON, "train.py", select=["P5"]).findings] == ["P5"]
    script = tmp_path / "train.py"
    script.write_text(P5_SEMICOLON)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    before = [re.search(r"weight (\[.*\])", out).group(1) for out in outs]
    assert before[0] != before[1]  # each rank re-drew its own weights after DDP's broadcast
    after, _ = _patched(tmp_path, "init-before-ddp", P5_SEMICOLON)
    assert "model.reset_parameters()\nmodel = DDP(model)\n" in after
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    weights = [re.search(r"weight (\[.*\])", out).group(1) for out in outs]
    assert weights[0] == weights[1]
    assert not lint_source(after, "train.py", select=["P5"]).findings


def test_d26_surgery_in_a_one_line_rank0_branch_runs_on_every_rank_and_its_print_stays_on_rank0(tmp_path):
    assert [f.entry_id for f in lint_source(D26_ONE_LINE_IF, "train.py", select=["D26"]).findings] == ["D26"]
    script = tmp_path / "train.py"
    script.write_text(D26_ONE_LINE_IF)
    codes, outs, _ = run_ranks(script)
    assert codes[0] not in (0, None) or codes[1] not in (0, None), outs  # DDP compares the shapes and refuses
    after, _ = _patched(tmp_path, "reshape-on-every-rank", D26_ONE_LINE_IF)
    assert 'model.add_module("head", torch.nn.Linear(4, 2))\nif rank == 0:\n    print("head added"' in after
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    assert "head added" in outs[0] and "head added" not in outs[1]
    assert "trained on rank 0" in outs[0] and "trained on rank 1" in outs[1]


def test_d26_forward_pass_goes_between_the_lazy_model_and_its_wrap_on_the_same_line(tmp_path):
    """The forward pass used to be put before the whole line, where `model` was not yet built (a NameError)."""
    script = tmp_path / "train.py"
    after, _ = _patched(tmp_path, "lazy-shapes-before-ddp", D26_LAZY_SAME_LINE, {"sample_input": "torch.zeros(1, 4)"})
    built = after.index("model = torch.nn.Sequential(torch.nn.LazyLinear(2))\n")
    warm = after.index("    model(torch.zeros(1, 4))\n")
    wrap = after.index("model = DDP(model)\n")
    assert built < warm < wrap
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    assert "trained on rank 0" in outs[0] and "trained on rank 1" in outs[1]


def test_a_split_is_kept_only_where_the_planner_changes_something(tmp_path):
    """A `a; b` line the fix does not touch stays as the user wrote it."""
    text = D20_SEMICOLONS.replace("import datetime\n", "import datetime; import os\n")
    after, _ = _patched(tmp_path, "collective-skip", text)
    assert "import datetime; import os\n" in after
    assert "model = DDP(torch.nn.Linear(4, 1)); opt = " in after
