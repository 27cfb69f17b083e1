"""P6's patch: the micro-steps of a DDP loop that accumulates gradients run under no_sync(), forward included."""
from __future__ import annotations

import ast

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.accum import accumulation_no_sync
from gpudoctor.engine.lint import lint_source

HEAD = "import torch\nmodel = DDP(Net())\n"


def _patch(loop: str, head: str = HEAD) -> str:
    new, notes = accumulation_no_sync(head + loop, "train.py", {})
    ast.parse(new)
    assert "no_sync()" in notes[0]
    return new


def test_forward_and_backward_move_into_the_context_the_data_move_stays_out():
    new = _patch("for i, (x, y) in enumerate(loader):\n"
                 "    x = x.cuda()\n"
                 "    loss = crit(model(x), y)\n"
                 "    loss.backward()\n"
                 "    if (i + 1) % accum == 0:\n"
                 "        optimizer.step()\n")
    assert new == ("import torch\nimport contextlib\nmodel = DDP(Net())\n"
                   "for i, (x, y) in enumerate(loader):\n"
                   "    x = x.cuda()\n"
                   "    with (contextlib.nullcontext() if (i + 1) % accum == 0 else model.no_sync()):\n"
                   "        loss = crit(model(x), y)\n"
                   "        loss.backward()\n"
                   "    if (i + 1) % accum == 0:\n"
                   "        optimizer.step()\n")


def test_autocast_block_scaler_and_an_attribute_model():
    head = "import torch\nclass T:\n    def setup(self):\n        self.net = DistributedDataParallel(Net())\n"
    new = _patch("    def fit(self, loader):\n"
                 "        for step, batch in enumerate(loader):\n"
                 "            with torch.autocast('cuda'):\n"
                 "                loss = self.net(batch).mean()\n"
                 "            self.scaler.scale(loss).backward()\n"
                 "            if step % self.grad_accum_steps == 0 or step == len(loader) - 1:\n"
                 "                self.scaler.step(self.optim)\n"
                 "                self.scaler.update()\n", head)
    assert ("            with (contextlib.nullcontext() if step % self.grad_accum_steps == 0 or step == len(loader) - 1"
            " else self.net.no_sync()):\n                with torch.autocast('cuda'):\n") in new
    assert "\n                self.scaler.scale(loss).backward()\n" in new


def test_a_counter_changed_before_the_forward_opens_the_context_after_it():
    new = _patch("while True:\n"
                 "    micro += 1\n"
                 "    loss = model(next(it)).sum()\n"
                 "    loss.backward()\n"
                 "    if micro % accum_steps == 0:\n"
                 "        opt.step()\n")
    assert "    micro += 1\n    with (contextlib.nullcontext() if micro % accum_steps == 0 else model.no_sync()):\n" in new


def test_a_counter_bumped_after_the_backward_is_read_ahead_in_the_context():
    """QA23 L2, the commonest shape: `step += 1` between the backward and `if step % n == 0`. The context is entered
    before the bump, so it reads the counter as it will be at the step: step becomes (step + 1)."""
    new = _patch("for x in loader:\n"
                 "    loss = model(x).sum() / accum_steps\n"
                 "    loss.backward()\n"
                 "    step += 1\n"
                 "    if step % accum_steps == 0 and self.step > 0:\n"
                 "        opt.step()\n")
    assert ("    with (contextlib.nullcontext() if (step + 1) % accum_steps == 0 and self.step > 0 else "
            "model.no_sync()):\n        loss = model(x).sum() / accum_steps\n        loss.backward()\n"
            "    step += 1\n    if step % accum_steps == 0 and self.step > 0:\n") in new


@pytest.mark.parametrize("source, why", [
    ("for b in loader:\n    model(b).sum().backward()\n    if i % 4 == 0:\n        opt.step()\n", "not a DDP script"),
    (HEAD + "for i, b in enumerate(loader):\n    with model.no_sync():\n        model(b).sum().backward()\n"
            "    if i % 4 == 0:\n        opt.step()\n", "already skip"),
    ("import accelerate\n" + HEAD + "for i, b in enumerate(loader):\n    model(b).sum().backward()\n"
     "    if i % 4 == 0:\n        opt.step()\n", "wrapper"),
    (HEAD + "for i, b in enumerate(loader):\n    model(b).sum().backward()\n    opt.step()\n"
            "    if i % 4 == 0:\n        scheduler.step()\n", "no training loop"),  # steps every micro-batch
    (HEAD + "for b in loader:\n    model(b).sum().backward()\n    n *= 2\n    if n % 4 == 0:\n        opt.step()\n",
     "changes between the backward and the step"),
    (HEAD + "for b in loader:\n    model(b).sum().backward()\n    n += 1\n    n += 1\n    if n % 4 == 0:\n"
            "        opt.step()\n", "changes between the backward and the step"),
    (HEAD + "for b in loader:\n    model(b).sum().backward()\n    if should_step() % 4 == 0:\n        opt.step()\n",
     "calls a function"),
    (HEAD + "for b in loader:\n    loss = compute(b)\n    loss.backward()\n    if k % 4 == 0:\n        opt.step()\n",
     "no forward of the DDP model"),
])
def test_left_alone_with_the_reason(source, why):
    with pytest.raises(NotApplicable, match=why):
        accumulation_no_sync(source, "train.py", {})


def test_lint_no_longer_reports_p6_on_the_patched_script():
    source = ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
              "def train(loader, model, optimizer):\n    model = DDP(model)\n"
              "    for i, (x, y) in enumerate(loader):\n        loss = model(x).sum()\n        loss.backward()\n"
              "        if (i + 1) % 8 == 0:\n            optimizer.step()\n            optimizer.zero_grad()\n")
    assert [f.entry_id for f in lint_source(source, "t.py").findings] == ["P6"]
    new, _ = accumulation_no_sync(source, "t.py", {})
    assert "P6" not in [f.entry_id for f in lint_source(new, "t.py").findings]
