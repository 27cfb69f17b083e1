"""P4's patch: a loop's targets follow its inputs to the device, right after the inputs' move."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.targets import move_targets
from gpudoctor.engine.lint import lint_source


def test_after_the_inputs_move_with_its_arguments():
    source = ("for x, y in loader:\n    x = x.to(device, non_blocking=True)\n    out = model(x)\n"
              "    loss = criterion(out, y)\n")
    new, notes = move_targets(source, "t.py", {})
    assert new == ("for x, y in loader:\n    x = x.to(device, non_blocking=True)\n"
                   "    y = y.to(device, non_blocking=True)\n    out = model(x)\n    loss = criterion(out, y)\n")
    assert notes[0].startswith("y now moves")


def test_an_inline_move_puts_it_first_in_the_loop_and_several_targets_each_get_one():
    source = ("for i, (x, y, w) in enumerate(tqdm(train_loader)):\n"
              "    loss = F.cross_entropy(model(x.cuda()), y, weight=w)\n")
    new, _ = move_targets(source, "t.py", {})
    assert new.startswith("for i, (x, y, w) in enumerate(tqdm(train_loader)):\n    y = y.cuda()\n    w = w.cuda()\n")


@pytest.mark.parametrize("source", [
    "for x, y in loader:\n    x, y = x.to(d), y.to(d)\n    loss = criterion(model(x), y)\n",
    "for x, y in loader:\n    loss = criterion(model(x), y)\n",  # everything on the CPU
    "for a, b in zip(xs, ys):\n    a = a.to(d)\n    loss = criterion(a, b)\n",  # not a loop over batches
])
def test_left_alone(source):
    with pytest.raises(NotApplicable, match="no loop over batches"):
        move_targets(source, "t.py", {})


def test_lint_and_fix_agree_in_a_nested_loop():
    source = ("def train(model, loader, criterion, device):\n    for epoch in range(3):\n"
              "        for x, y in loader:\n            x = x.to(device)\n            loss = criterion(model(x), y)\n")
    assert [f.entry_id for f in lint_source(source, "t.py").findings] == ["P4"]
    new, _ = move_targets(source, "t.py", {})
    assert "            y = y.to(device)\n" in new
    assert "P4" not in [f.entry_id for f in lint_source(new, "t.py").findings]
