"""P6: gradient accumulation under DDP without no_sync() all-reduces on every micro-step."""
from __future__ import annotations

import ast
import re

from gpudoctor.engine.lint.model import Check, Hit

ACCUM_TEST = re.compile(r"%|accum|grad_acc|update_freq", re.IGNORECASE)
HANDLED = ("no_sync", "require_backward_grad_sync", "set_requires_gradient_sync", "accumulate", "LightningModule")


class AccumulationWithoutNoSync(Check):
    code = "P6"
    slug = "accumulation-without-no-sync"
    severity = "warning"
    summary = "optimizer.step() every N micro-batches under DDP but backward() outside no_sync(): N x the traffic"

    def find(self, script):
        if not script.uses("DistributedDataParallel", "DDP") or script.uses(*HANDLED) or \
                script.imports_any("deepspeed", "accelerate", "lightning", "pytorch_lightning"):
            return
        for node, ctx in script.ifs:
            if not ACCUM_TEST.search(ast.unparse(node.test)):
                continue
            inside = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            calls = script.calls_in(ctx.func)
            steps = [s for s in calls if s.attr == "step" and s.line in inside and _optimizer(s)]
            if not steps or any(s.attr == "step" and s.loop and s.line not in inside and _optimizer(s) for s in calls):
                continue  # a scheduler stepping every N iterations, or an optimizer that steps every iteration
            backward = next((s for s in calls if s.attr == "backward" and s.loop), None)
            if backward is not None:
                yield Hit(backward.line, backward.node.col_offset,
                          f"gradients accumulate (optimizer step under `if {ast.unparse(node.test)[:40]}:`, line "
                          f"{node.lineno}) but DDP all-reduces at every backward(); run the non-final micro-steps "
                          "inside `with model.no_sync():`")
                return


def _optimizer(site) -> bool:
    return optimizer_receiver(site.recv or site.recv_last or "")


def optimizer_receiver(recv: str) -> bool:
    """Whether `<recv>.step()` steps an optimizer (or a grad scaler), not a scheduler."""
    recv = recv.lower()
    return ("optim" in recv or recv.endswith("opt") or "scaler" in recv) and "sched" not in recv
