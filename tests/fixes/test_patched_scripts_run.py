"""QA25 Q4, Q5, Q24, Q25, Q28, Q29: the D22, P3 and D23 planners keep to what lint finds, the MN3 and D3 planners
write names that mean what they should where they write them, and the scripts they patch still run. Each script runs
for real on two gloo ranks (test_behaviour.run_ranks)."""
from __future__ import annotations

import ast
import re

import pytest

pytest.importorskip("torch")

from test_behaviour import run_ranks  # noqa: E402  (the runner after the skip)

from gpudoctor.engine.fixes.errors import NotApplicable  # noqa: E402
from gpudoctor.engine.fixes.patches import get  # noqa: E402
from gpudoctor.engine.lint import lint_source  # noqa: E402

HEAD = """from datetime import timedelta
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset
"""

# the sampler is a local of the function that builds the loader; the epoch loop is in main()
SAMPLER_IN_A_HELPER = HEAD + """

def build():
    ds = TensorDataset(torch.arange(16.0).unsqueeze(1))
    sampler = DistributedSampler(ds)
    return DataLoader(ds, batch_size=2, sampler=sampler)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    loader = build()
    for epoch in range(2):
        order = []
        for (b,) in loader:
            order += [int(x) for x in b.flatten().tolist()]
        print(f"rank {dist.get_rank()} epoch {epoch} order {order}", flush=True)
    dist.destroy_process_group()


main()
"""

# the loaders are built in a helper; the training loop in main() reads what it returns
LOADERS_IN_A_HELPER = HEAD + """

def make_loaders():
    train_ds = TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
    train_loader = DataLoader(train_ds, batch_size=4, shuffle=True, drop_last=True)
    return train_loader


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    train_loader = make_loaders()
    model = DDP(nn.Linear(4, 1))
    seen = 0
    for epoch in range(2):
        for x, y in train_loader:
            nn.functional.mse_loss(model(x), y).backward()
            seen += len(x)
    print(f"rank {dist.get_rank()} samples {seen}", flush=True)
    dist.destroy_process_group()


main()
"""

ALREADY_SPLIT = HEAD + """
dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
full = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
mine = Subset(full, list(range(rank, len(full), world)))
loader = DataLoader(mine, batch_size=8, shuffle=True, drop_last=True)
model = DDP(nn.Linear(4, 1))
"""

OWN_FILES = HEAD + """import os

dist.init_process_group("gloo", timeout=timedelta(seconds=10))
rank = dist.get_rank()
t = torch.ones(1) * rank
dist.all_reduce(t)
for step in range(2):
    print(f"[rank {rank}] step {step} reduced {t.item()}", flush=True)
torch.save({"rng": torch.get_rng_state()}, f"rng_state_{rank}.pt")
torch.save({"value": t}, "shared.pt")
dist.destroy_process_group()
"""


def _patch(action: str, text: str, tmp_path) -> tuple[str, list[str]]:
    after, notes = get(action)(text, str(tmp_path / "train.py"), {})
    ast.parse(after)
    return after, notes


def test_set_epoch_reaches_a_sampler_that_is_another_functions_local_through_the_loader(tmp_path):
    after, _ = _patch("sampler-set-epoch", SAMPLER_IN_A_HELPER, tmp_path)
    assert "loader.sampler.set_epoch(epoch)" in after and "\n        sampler.set_epoch" not in after
    script = tmp_path / "train.py"
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs  # it was a NameError: name 'sampler' is not defined
    orders = re.findall(r"rank 0 epoch (\d) order (\[.*\])", outs[0])
    assert len(orders) == 2 and orders[0][1] != orders[1][1]  # reshuffled between epochs
    assert not lint_source(after, "train.py", select=["D22"]).findings


def test_the_p3_sampler_made_in_a_helper_gets_its_set_epoch_through_the_returned_loader(tmp_path):
    after, _ = _patch("distributed-sampler", LOADERS_IN_A_HELPER, tmp_path)
    assert "train_loader.sampler.set_epoch(epoch)" in after
    script = tmp_path / "train.py"
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    assert all("samples 40" in out for out in outs), outs  # 20 of the 40 per rank and epoch, two epochs


def test_p3_leaves_a_loader_over_a_dataset_already_split_by_rank(tmp_path):
    assert not lint_source(ALREADY_SPLIT, "train.py", select=["P3"]).findings
    with pytest.raises(NotApplicable, match="not already split by rank"):
        get("distributed-sampler")(ALREADY_SPLIT, str(tmp_path / "train.py"), {})


def test_d23_gates_the_shared_save_and_leaves_every_ranks_own_file_and_named_prints(tmp_path, monkeypatch):
    after, notes = _patch("rank-zero-side-effects", OWN_FILES, tmp_path)
    assert "0 print(s) and 1 save(s)" in notes[0]
    assert 'torch.save({"rng": torch.get_rng_state()}, f"rng_state_{rank}.pt")' in after  # not gated, not renamed
    script = tmp_path / "train.py"
    script.write_text(after)
    monkeypatch.chdir(tmp_path)  # the ranks write their files where they start
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    assert "[rank 1] step 1" in outs[1]  # rank 1 still prints its own lines
    assert {p.name for p in tmp_path.glob("*.pt")} == {"rng_state_0.pt", "rng_state_1.pt", "shared.pt"}


TIMESTAMPED = """from datetime import datetime
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    print(datetime.now().isoformat(), "rank", dist.get_rank(), flush=True)
    t = torch.ones(1)
    dist.all_reduce(t)
    print("sum", t.item(), flush=True)
    dist.destroy_process_group()


main()
"""


def test_mn3_timeout_is_spelled_so_that_it_runs_beside_from_datetime_import_datetime(tmp_path):
    """QA25 Q28: `datetime.timedelta(...)` was written where `datetime` is the class: AttributeError on every rank."""
    after, _ = _patch("init-timeout", TIMESTAMPED, tmp_path)
    assert "timeout=timedelta(minutes=10)" in after and "from datetime import timedelta\n" in after
    script = tmp_path / "train.py"
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    assert all("sum 2.0" in out for out in outs)
    module_import = TIMESTAMPED.replace("from datetime import datetime", "import datetime as dt").replace(
        "datetime.now()", "dt.datetime.now()")
    after, _ = _patch("init-timeout", module_import, tmp_path)
    assert "timeout=dt.timedelta(minutes=10)" in after and "from datetime import timedelta" not in after


ARGPARSE_LOCAL_RANK = """import argparse
import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", "--local-rank", type=int, default=-1)
    args = parser.parse_args()
    local_rank = args.local_rank
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    print(f"rank {rank} argparse local_rank {local_rank}", flush=True)


if __name__ == "__main__":
    main()
"""

# runs a script on CPU: gloo for nccl, and torch.cuda.set_device only records the index it is given
CPU_SHIM = """import runpy, sys
import torch
import torch.distributed as dist

_init = dist.init_process_group
dist.init_process_group = lambda backend=None, **kw: _init("gloo", **kw)
torch.cuda.set_device = lambda index: print(f"set_device({index})", flush=True)
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_d3_takes_local_rank_from_the_environment_not_from_an_argparse_default(tmp_path):
    """QA25 Q29: the fix reused `local_rank = args.local_rank`, -1 under torchrun (which passes no --local-rank):
    set_device(-1) does nothing and every rank stays on cuda:0."""
    after, _ = _patch("device-from-local-rank", ARGPARSE_LOCAL_RANK, tmp_path)
    (tmp_path / "train.py").write_text(after)
    shim = tmp_path / "shim.py"
    shim.write_text(CPU_SHIM.replace("sys.argv = [sys.argv[1]]", f"sys.argv = [{str(tmp_path / 'train.py')!r}]"))
    codes, outs, _ = run_ranks(shim)
    assert codes == [0, 0], outs
    assert "set_device(0)" in outs[0] and "set_device(1)" in outs[1], outs
    assert "argparse local_rank -1" in outs[0]  # the script's own variable is left as it was


OPTIMIZER_BEFORE_INIT = """from datetime import timedelta
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

LR = 1e-3
net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
opt = torch.optim.SGD([
    {"params": net[0].parameters(), "lr": LR * 10},
    {"params": net[1].parameters()},
], lr=LR)
dist.init_process_group("gloo", timeout=timedelta(seconds=10))
model = DDP(net)
model(torch.randn(2, 4)).sum().backward()
opt.step()
print("lrs", [g["lr"] for g in opt.param_groups], flush=True)
dist.destroy_process_group()
"""


def test_d11_scales_an_optimizer_built_before_init_and_every_param_group(tmp_path):
    """QA25 Q8: `dist.get_world_size()` was written into an optimizer built before init_process_group (a ValueError
    at start), and a param group's own lr was left unscaled (the groups' ratio changed)."""
    after, notes = _patch("lr-scale-world-size", OPTIMIZER_BEFORE_INIT, tmp_path)
    assert "is built before init_process_group" in " ".join(notes)
    script = tmp_path / "train.py"
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    lrs = [float(x) for x in re.search(r"lrs \[(.*)\]", outs[0]).group(1).split(",")]
    assert lrs == pytest.approx([0.02, 0.002])  # both groups times 2 ranks, their ratio kept


def test_d11_scales_the_one_cycle_schedule_that_would_reset_the_lr(tmp_path):
    text = OPTIMIZER_BEFORE_INIT.replace(
        'dist.init_process_group("gloo", timeout=timedelta(seconds=10))\n',
        'dist.init_process_group("gloo", timeout=timedelta(seconds=10))\n'
        "sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=10)\n")
    after, notes = _patch("lr-scale-world-size", text, tmp_path)
    assert "OneCycleLR(opt, max_lr=LR * dist.get_world_size()" in after  # after the init: the group's own size
    assert "OneCycleLR(max_lr)" in notes[0]


TWO_SAMPLERS = HEAD + """
dist.init_process_group("gloo", timeout=timedelta(seconds=10))
train_ds = TensorDataset(torch.arange(16.0).unsqueeze(1))
val_ds = TensorDataset(torch.arange(8.0).unsqueeze(1))
train_sampler = DistributedSampler(train_ds, shuffle=True)
val_sampler = DistributedSampler(val_ds, shuffle=True)
train_loader = DataLoader(train_ds, sampler=train_sampler, batch_size=2)
val_loader = DataLoader(val_ds, sampler=val_sampler, batch_size=2)
for epoch in range(2):
    val_sampler.set_epoch(epoch)
    order = []
    for (b,) in train_loader:
        order += [int(x) for x in b.flatten().tolist()]
    print(f"rank {dist.get_rank()} epoch {epoch} order {order}", flush=True)
dist.destroy_process_group()
"""


def test_d22_is_per_sampler_a_validation_samplers_set_epoch_does_not_cover_the_training_one(tmp_path):
    """QA25 Q13: any set_epoch anywhere silenced D22, and the fix refused ("already calls set_epoch")."""
    [finding] = lint_source(TWO_SAMPLERS, "train.py", select=["D22"]).findings
    assert "train_sampler = DistributedSampler" in TWO_SAMPLERS.splitlines()[finding.line - 1]
    assert "for this sampler" in finding.message
    script = tmp_path / "train.py"
    script.write_text(TWO_SAMPLERS)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    before = re.findall(r"rank 0 epoch \d order (\[.*\])", outs[0])
    assert before[0] == before[1]  # the same training order every epoch
    after, _ = _patch("sampler-set-epoch", TWO_SAMPLERS, tmp_path)
    assert "    train_sampler.set_epoch(epoch)\n" in after
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    orders = re.findall(r"rank 0 epoch \d order (\[.*\])", outs[0])
    assert orders[0] != orders[1]
    assert not lint_source(after, "train.py", select=["D22"]).findings


INIT_AFTER_MOVED_WRAP = """from datetime import timedelta
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.02)


dist.init_process_group("gloo", timeout=timedelta(seconds=10))
torch.manual_seed(dist.get_rank())
model = nn.Linear(8, 1)
model = DDP(model.to("cpu"))
model.apply(init_weights)
print("weight", [round(v, 6) for v in model.module.weight.flatten().tolist()], flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("wrap", ['DDP(model.to("cpu"))', "DDP(module=model)", "DDP(model.float().cpu())"])
def test_p5_sees_an_init_after_a_wrap_of_the_moved_model_and_the_fix_makes_the_ranks_agree(tmp_path, wrap):
    """QA25 Q1: DDP(model.to(device)), the form the P2 fix writes, hid a live P5 from lint and fix."""
    text = INIT_AFTER_MOVED_WRAP.replace('DDP(model.to("cpu"))', wrap)
    assert [f.entry_id for f in lint_source(text, "train.py", select=["P5"]).findings] == ["P5"]
    after, _ = _patch("init-before-ddp", text, tmp_path)
    assert f"model.apply(init_weights)\nmodel = {wrap}\n" in after
    if wrap != 'DDP(model.to("cpu"))':
        return  # the run is the same for every form
    script = tmp_path / "train.py"
    for text_now, agree in ((text, False), (after, True)):
        script.write_text(text_now)
        codes, outs, _ = run_ranks(script)
        assert codes == [0, 0], outs
        weights = [re.search(r"weight (\[.*\])", out).group(1) for out in outs]
        assert (weights[0] == weights[1]) is agree


EARLY_RETURN = """from datetime import timedelta
import torch
import torch.distributed as td
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train_step(model, opt, x):
    loss = model(x).pow(2).mean()
    if torch.isnan(loss).any():
        return None
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


td.init_process_group("gloo", timeout=timedelta(seconds=4))
model = DDP(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    x = torch.ones(2, 4)
    if td.get_rank() == 1 and step == 1:
        x[0, 0] = float("nan")
    print(td.get_rank(), step, train_step(model, opt, x), flush=True)
print("finished on rank", td.get_rank(), flush=True)
td.destroy_process_group()
"""


def test_d20_sees_a_train_step_that_returns_early_on_nan_and_the_fix_keeps_the_ranks_paired(tmp_path):
    """QA25 Q21: the skip written as an early `return` in a train-step helper went unreported."""
    [finding] = lint_source(EARLY_RETURN, "train.py", select=["D20"]).findings
    assert "torch.isnan(loss).any()" in finding.message
    script = tmp_path / "train.py"
    script.write_text(EARLY_RETURN)
    codes, outs, _ = run_ranks(script)
    assert codes != [0, 0], outs
    after, _ = _patch("collective-skip", EARLY_RETURN, tmp_path)
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    assert "1 1 None" in outs[1] and "0 1 None" in outs[0]  # both ranks skipped step 1 together
    assert not lint_source(after, "train.py", select=["D20"]).findings
