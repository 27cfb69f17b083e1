"""D20: a step skipped on a NaN/inf check each rank makes alone becomes one decision for all ranks."""
from __future__ import annotations

import ast

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.checks.d20_rank_local_skip import rank_local_skips


def _tensor_name(check: ast.Call) -> str | None:
    """The tensor the check reads (`loss` in torch.isnan(loss) or math.isfinite(loss.item())): the flag goes there."""
    for node in ast.walk(check):
        if isinstance(node, ast.Name) and node.id not in ("torch", "math", "np", "numpy"):
            return node.id
    return None


def collective_skip(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """`if torch.isnan(loss): continue` in a DDP loop becomes
        skip_step = torch.tensor(float(bool(torch.isnan(loss))), device=loss.device)
        dist.all_reduce(skip_step, op=dist.ReduceOp.MAX)
        if skip_step.item() > 0: continue
    so every rank skips the same steps and the collectives stay paired. The loops the lint's D20 check reports."""
    if "DistributedDataParallel" not in text and "DDP(" not in text and "FSDP" not in text and "fully_shard" not in text:
        raise NotApplicable(f"{path}: not a DDP or FSDP script")
    module = h.parse(text, path)
    dist = h.dist_alias(module)
    taken = h.variable_names(module)
    flag = next(n for n in ("skip_step", "skip_this_step", "gd_skip_step") if n not in taken)
    done: list[str] = []
    refused: list[str] = []

    def patch_loop(original):
        # `loss.backward(); opt.step()` on one line: one statement per line, so the loop's statements map one to one
        loop = original.with_changes(body=original.body.with_changes(body=h.one_per_line(list(original.body.body))))
        tree = h.ast_stmts(loop)[0]
        found = list(rank_local_skips(tree))
        if not found or len(tree.body) != len(loop.body.body):
            return original
        targets = {id(stmt): check for stmt, check in found}
        body = []
        for node, stmt in zip(tree.body, loop.body.body):
            check = targets.get(id(node))
            if check is None:
                body.append(stmt)
                continue
            tensor = _tensor_name(check)
            if tensor is None:
                refused.append(f"`if {ast.unparse(node.test)[:40]}:` checks no tensor by name")
                body.append(stmt)
                continue
            test = h.code(stmt.test)
            done.append(test)
            first = h.stmt(f"{flag} = torch.tensor(float(bool({test})), device={tensor}.device)")
            body.append(first.with_changes(leading_lines=stmt.leading_lines))
            body.append(h.stmt(f"{dist}.all_reduce({flag}, op={dist}.ReduceOp.MAX)  # the same decision on every rank"))
            body.append(stmt.with_changes(leading_lines=(), test=h.expr(f"{flag}.item() > 0")))
        return loop.with_changes(body=loop.body.with_changes(body=body))

    def rewrite(stmts, block):  # a loop's `continue`, or a train-step function's early `return`
        return [patch_loop(s) if isinstance(s, (cst.For, cst.FunctionDef)) and isinstance(s.body, cst.IndentedBlock)
                else s for s in stmts]

    module = h.rewrite_bodies(module, rewrite)
    if not done:
        why = f" ({refused[0]})" if refused else ""
        raise NotApplicable(f"{path}: no step skipped on a NaN/inf check before its backward{why}")
    module = h.add_import(module, "import torch", "torch")  # torch.distributed comes with it
    return module.code, [f"`{done[0]}` is now decided for all ranks (all_reduce with MAX): when any rank sees it, every "
                         "rank skips that step, so the all-reduces stay paired; find why that rank's loss was "
                         "not finite (the batch, the learning rate, fp16 overflow)"]
