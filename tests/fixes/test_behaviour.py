"""The fixes change what the scripts do, run for real on CPU with gloo (two ranks as child processes, bounded)."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

DATA = Path(__file__).resolve().parent.parent / "data" / "fixes"
WALL_S = 120  # generous: importing torch on a loaded 2-core machine takes seconds per rank


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# torch 2.13's CPU build now and then aborts a rank at interpreter exit, after destroy_process_group has
# returned and the script has printed everything (std::terminate on a still-joinable thread; about 3% of
# runs here, on either rank, with or without a barrier before the destroy). That is torch's teardown, not
# the behaviour under test, so such a run is started again (four times at most: on a loaded two-core machine
# three aborted runs in a row were seen once, 2026-11-28); any other abort still counts.
EXIT_ABORT = "terminate called without an active exception"


def _aborted_at_exit(code: int | None, out: str) -> bool:
    return code == -signal.SIGABRT and out.rstrip().endswith(EXIT_ABORT)


def run_ranks(script: Path, world: int = 2, extra_env: dict | None = None, wall_s: float = WALL_S):
    """Start `world` ranks of a script the way torchrun would; (exit codes or None if killed, outputs, seconds)."""
    for _ in range(5):
        codes, outputs, took = _run_ranks_once(script, world, extra_env, wall_s)
        if not any(map(_aborted_at_exit, codes, outputs)):
            break
    return codes, outputs, took


def _run_ranks_once(script: Path, world: int, extra_env: dict | None, wall_s: float):
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
               "OMP_NUM_THREADS": "1", **(extra_env or {})}
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, start_new_session=True, text=True))
    start = time.monotonic()
    codes, outputs = [], []
    try:
        for proc in procs:
            left = max(0.1, wall_s - (time.monotonic() - start))
            try:
                out, _ = proc.communicate(timeout=left)
                codes.append(proc.returncode)
            except subprocess.TimeoutExpired:
                codes.append(None)
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            outputs.append(out)
    finally:
        for proc in procs:  # no orphans, whatever happened
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return codes, outputs, time.monotonic() - start


def test_d21_rank0_only_collective_hangs_before_the_fix_and_completes_after(tmp_path):
    before = DATA / "D21" / "eval_on_rank0.py"
    after = tmp_path / "eval_on_rank0_fixed.py"
    after.write_text(Path(str(before) + ".fixed").read_text())
    # before: rank 0 waits in the all_reduce, rank 1 in the barrier, until the process group's 3 s timeout
    # ends both. A loaded machine can stall a rank before it gets there, so one retry is allowed for that.
    for attempt in range(2):
        codes, outs, took = run_ranks(before, extra_env={"TRAIN_DIST_TIMEOUT": "3"})
        if "in all_reduce" in outs[0] and "in barrier" in outs[1]:
            break
    assert None not in codes and 0 not in codes, (codes, outs)  # they ended on their own: bounded
    assert "in all_reduce" in outs[0] and "in barrier" in outs[1], outs
    assert re.search(r"Timed out|Connection (closed|reset)", outs[0] + outs[1]), outs
    assert not re.search(r"final val accuracy \d", outs[0])  # rank 0 never got its reduced value

    # after: the same ranks complete (a longer timeout, so that load alone cannot fail them)
    codes, outs, took = run_ranks(after, extra_env={"TRAIN_DIST_TIMEOUT": "60"})
    assert codes == [0, 0], outs
    assert re.findall(r"final val accuracy \d\.\d{3}", outs[0])
    assert "val accuracy" not in outs[1]  # the print stays on rank 0


def _orders(output: str) -> list[str]:
    return re.findall(r"epoch \d order (\[.*\])", output)


def test_d22_same_shuffle_every_epoch_before_the_fix_and_a_new_one_after(tmp_path):
    before = DATA / "D22" / "no_set_epoch.py"
    after = tmp_path / "no_set_epoch_fixed.py"
    after.write_text(Path(str(before) + ".fixed").read_text())

    codes, outs, _ = run_ranks(before)
    assert codes == [0, 0], outs
    orders = _orders(outs[0])
    assert len(orders) == 3 and len(set(orders)) == 1, orders

    codes, outs, _ = run_ranks(after)
    assert codes == [0, 0], outs
    orders = _orders(outs[0])
    assert len(orders) == 3 and len(set(orders)) == 3, orders
    for order in map(json.loads, orders):  # each epoch: half of the 64 samples, none twice
        assert len(order) == 32 and len(set(order)) == 32 and set(order) <= set(range(64))



LAZY = """import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = torch.nn.Sequential(torch.nn.LazyLinear(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
ddp = DDP(model)
ddp(torch.zeros(4, 32)).sum().backward()
print("trained on rank", dist.get_rank(), flush=True)
dist.destroy_process_group()
"""


def test_d26_lazy_layers_refused_by_ddp_before_the_fix_and_trained_after(tmp_path):
    """QA23 A18: a model with a LazyLinear is refused by DDP on every rank; `fix D26 --param sample_input=...`
    runs one forward pass before the wrap, after which both ranks train and lint no longer flags the layer."""
    from gpudoctor.engine.fixes.errors import NotApplicable
    from gpudoctor.engine.fixes.patches import get
    from gpudoctor.engine.lint import lint_source

    script = tmp_path / "lazy.py"
    script.write_text(LAZY)
    assert [f.entry_id for f in lint_source(LAZY, "lazy.py", select=["D26"]).findings] == ["D26"]
    codes, outs, _ = run_ranks(script)
    assert codes[0] not in (0, None) and codes[1] not in (0, None), outs
    assert all("uninitialized parameters" in out for out in outs), outs
    patch = get("lazy-shapes-before-ddp")
    with pytest.raises(NotApplicable, match="sample_input"):
        patch(LAZY, str(script), {})
    after, notes = patch(LAZY, str(script), {"sample_input": "torch.zeros(1, 32)"})
    assert "model(torch.zeros(1, 32))" in notes[0]
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    assert "trained on rank 0" in outs[0] and "trained on rank 1" in outs[1]
    assert not lint_source(after, "lazy.py", select=["D26"]).findings
    with pytest.raises(NotApplicable, match="already runs a forward pass"):
        patch(after, str(script), {"sample_input": "torch.zeros(1, 32)"})


P6_COUNTER = """import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
reductions = []


def counted(state, bucket):
    reductions.append(1)
    return torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook(state, bucket)


import torch.distributed.algorithms.ddp_comm_hooks.default_hooks  # noqa: E402
model.register_comm_hook(None, counted)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
accum_steps = 4
step = 0
for x in [torch.randn(2, 4) for _ in range(8)]:
    loss = model(x).sum() / accum_steps
    loss.backward()
    step += 1
    if step % accum_steps == 0:
        opt.step()
        opt.zero_grad()
print("reductions", len(reductions), "weight", [round(v, 6) for v in model.module.weight.flatten().tolist()], flush=True)
dist.destroy_process_group()
"""


def test_p6_counter_loop_reduces_every_micro_step_before_the_fix_and_once_per_step_after(tmp_path):
    """QA23 L2: `step += 1` after the backward, then `if step % accum_steps == 0`. Before: 8 all-reduces for 8
    micro-batches; after: 2, one per optimizer step, and the weights every rank ends with are the same as before."""
    from gpudoctor.engine.fixes.patches import get

    script = tmp_path / "accum.py"
    script.write_text(P6_COUNTER)
    codes, before, _ = run_ranks(script)
    assert codes == [0, 0], before
    after_text, _ = get("accumulation-no-sync")(P6_COUNTER, str(script), {})
    script.write_text(after_text)
    codes, after, _ = run_ranks(script)
    assert codes == [0, 0], after
    counts = lambda outs: [int(re.search(r"reductions (\d+)", o).group(1)) for o in outs]  # noqa: E731
    weights = lambda outs: [re.search(r"weight (\[.*\])", o).group(1) for o in outs]  # noqa: E731
    assert counts(before) == [8, 8] and counts(after) == [2, 2]
    assert weights(after) == weights(before) and weights(after)[0] == weights(after)[1]


LAZY_CLASS = """import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.LazyLinear(16)
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        return self.out(self.fc(x))


def main():
    dist.init_process_group("gloo")
    model = DDP(Net())
    model(torch.randn(8, 4)).sum().backward()
    print("trained on rank", dist.get_rank(), flush=True)
    dist.destroy_process_group()


main()
"""


def test_d26_lazy_layers_of_a_model_built_inside_the_ddp_call_are_materialised_on_that_model(tmp_path):
    """QA24 R2: `DDP(Net())` got its forward pass on a second, throw-away Net(), so the wrapped one stayed lazy and the
    run still failed while lint called it clean. The construction is now bound to a name that both use."""
    from gpudoctor.engine.fixes.patches import get
    from gpudoctor.engine.lint import lint_source

    assert [f.entry_id for f in lint_source(LAZY_CLASS, "lazy.py", select=["D26"]).findings] == ["D26"]
    after, _ = get("lazy-shapes-before-ddp")(LAZY_CLASS, str(tmp_path / "lazy.py"), {"sample_input": "torch.randn(8, 4)"})
    assert "    net = Net()\n    with torch.no_grad():\n        net(torch.randn(8, 4))\n    model = DDP(net)\n" in after
    # a forward on another instance of the class never counted as materialising the wrapped one
    assert lint_source(LAZY_CLASS.replace("    model = DDP(Net())", "    Net()(torch.randn(8, 4))\n    model = DDP(Net())"),
                       "lazy.py", select=["D26"]).findings
    script = tmp_path / "lazy.py"
    script.write_text(after)
    codes, outs, _ = run_ranks(script)
    assert codes == [0, 0], outs
    assert "trained on rank 0" in outs[0] and "trained on rank 1" in outs[1]
    assert not lint_source(after, "lazy.py", select=["D26"]).findings
