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
            steps = [c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                     and c.func.attr == "step"]
            if not steps:
                continue
            backward = next((s for s in script.calls_in(ctx.func) if s.attr == "backward" and s.loop), None)
            if backward is not None:
                yield Hit(backward.line, backward.node.col_offset,
                          f"gradients accumulate (optimizer step under `if {ast.unparse(node.test)[:40]}:`, line "
                          f"{node.lineno}) but DDP all-reduces at every backward(); run the non-final micro-steps "
                          "inside `with model.no_sync():`")
                return
