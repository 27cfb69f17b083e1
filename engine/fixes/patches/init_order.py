"""P5: an init that ran on the DDP-wrapped model moved before the wrap, so DDP's broadcast hands every rank rank 0's."""
from __future__ import annotations

import ast

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.checks.p5_init_after_ddp import inits_after_wrap


class _Unwrap(cst.CSTTransformer):
    """`ddp.module` and `ddp` become `model`: the statement now runs on the bare model."""

    def __init__(self, wrapped: str, model: str):
        super().__init__()
        self.wrapped, self.model = wrapped, model

    def leave_Attribute(self, original, updated):
        if isinstance(original.value, cst.Name) and original.value.value == self.wrapped and updated.attr.value == "module":
            return cst.Name(self.model)
        return updated

    def leave_Name(self, original, updated):
        return cst.Name(self.model) if updated.value == self.wrapped else updated


def init_before_ddp(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """`model = DDP(model)` then `model.apply(init_weights)` (or model.module.reset_parameters(),
    nn.init.*_(model.module.fc.weight)) becomes the init on the bare model, then the wrap: DDP's constructor then
    broadcasts rank 0's initialised weights to every rank. The statements the lint's P5 check reports; an init that
    reads something assigned between the wrap and itself is left."""
    h.require_ddp(text, path)
    module = h.parse(text, path)
    moved: list[str] = []
    refused: list[str] = []

    def rewrite(original, block):
        # `model = DDP(model); model.apply(init)` on one line: split, so the init can move; kept only if it does
        stmts = h.one_per_line(original)
        if not any(isinstance(s, cst.SimpleStatementLine) and any(
                h.last(h.call_name(c)) in ("DDP", "DistributedDataParallel") for c in h.calls(s)) for s in stmts):
            return original  # no wrap in this block: nothing to read in it
        parsed = [h.ast_stmts(s)[0] for s in stmts]
        out = list(stmts)
        count = len(moved)
        for k, j, call, wrapped, model in sorted(inits_after_wrap(parsed), key=lambda t: -t[1]):
            reads = {n.id for n in ast.walk(parsed[j]) if isinstance(n, ast.Name)} - {wrapped, model}
            between = {n.id for s in parsed[k + 1:j] for n in ast.walk(s) if isinstance(n, ast.Name)
                       and isinstance(n.ctx, ast.Store)}
            if reads & between:
                refused.append(f"{ast.unparse(call)[:50]} reads {', '.join(sorted(reads & between))}, set after the wrap")
                continue
            stmt = out.pop(j).visit(_Unwrap(wrapped, model))
            moved.append(h.code(stmt.with_changes(leading_lines=())).strip())
            # the wrap's own comments stay above the block; the init keeps its comments
            out.insert(k, stmt.with_changes(leading_lines=(*out[k].leading_lines, *stmt.leading_lines)))
            out[k + 1] = out[k + 1].with_changes(leading_lines=())
        return out if len(moved) > count else original

    module = h.rewrite_bodies(module, rewrite)
    if not moved:
        why = f" ({refused[0]})" if refused else ""
        raise NotApplicable(f"{path}: no weight initialisation after DDP(...) to move before it{why}")
    return module.code, [f"`{moved[0]}` now runs on the bare model before DDP wraps it; DDP's constructor then "
                         "copies rank 0's weights to every rank (a shared torch.manual_seed before building the model "
                         "makes the draw itself the same everywhere)"]
