"""FSDP patches: D14, a mixed-precision policy that leaves the gradient reduction to follow a 16-bit param dtype."""
from __future__ import annotations

import ast

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.checks.d14_mixed_precision_half_set import POLICIES, half_set


def fsdp_reduce_dtype(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """`MixedPrecision(param_dtype=torch.bfloat16)` (FSDP1) or `MixedPrecisionPolicy(...)` (FSDP2) gains
    `reduce_dtype=torch.float32`: compute stays in 16 bits, the gradients are summed across ranks in 32. The same
    calls the lint's D14 check reports; a policy whose reduction dtype is chosen, or built from **kwargs, is left."""
    module = h.parse(text, path)
    fixed: list[str] = []

    def fix(call: cst.Call):
        if h.last(h.call_name(call)) not in POLICIES:
            return None
        tree = ast.parse(h.code(call), mode="eval").body
        dtype = half_set(tree) if isinstance(tree, ast.Call) else None
        if dtype is None:
            return None
        fixed.append(f"{h.last(h.call_name(call))}(param_dtype={dtype})")
        return h.add_kwarg(call, "reduce_dtype", h.expr("torch.float32"))

    module = h.replace_calls(module, fix)
    if not fixed:
        raise NotApplicable(f"{path}: no FSDP mixed-precision policy with a 16-bit param_dtype and no reduce_dtype")
    module = h.add_import(module, "import torch", "torch")
    return module.code, [f"{fixed[0]} now reduces gradients in float32 (reduce_dtype=torch.float32); forward and "
                         "backward still compute in 16 bits, and the reduction moves twice the bytes, which is "
                         "what a stable run costs. buffer_dtype is left as it was: set it if buffers should be cast"]
