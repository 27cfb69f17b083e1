"""P4: a batch's targets moved to the device the loop moves its inputs to, right after that move."""
from __future__ import annotations

import ast

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.checks.p4_target_left_on_cpu import left_targets


def _move_line(name: str, sibling: ast.Call) -> str:
    """`y = y.to(device, non_blocking=True)`: the sibling's own move, method and arguments, applied to name."""
    call = ast.Call(func=ast.Attribute(value=ast.Name(name, ast.Load()), attr=sibling.func.attr, ctx=ast.Load()),
                    args=sibling.args, keywords=sibling.keywords)
    return f"{name} = {ast.unparse(call)}"


def move_targets(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """For each loop over batches that moves one of its names (`x = x.to(device)`, `x.cuda()`) and hands another to
    the loss unmoved, `y = y.to(device)` goes right after the statement that moves x (or first in the loop when x
    is moved inside an expression); the loop's tensors then meet on one device. The loops the lint's P4 check
    reports, read from the same predicate."""
    module = h.parse(text, path)
    moved: list[str] = []

    def rewrite(stmts, block):
        out = []
        for s in stmts:
            if isinstance(s, cst.For) and isinstance(s.body, cst.IndentedBlock):
                s = _patched(s, moved)
            out.append(s)
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not moved:
        raise NotApplicable(f"{path}: no loop over batches that moves its inputs and passes a target to the loss "
                            "unmoved")
    return module.code, [f"{', '.join(dict.fromkeys(moved))} now move{'s' if len(moved) == 1 else ''} to the "
                         "device the inputs go to, in the same loop, before the loss sees them"]


def _patched(loop: cst.For, moved: list[str]) -> cst.For:
    tree = h.ast_stmts(loop)[0]
    found = list(left_targets(tree))
    if not found:
        return loop
    body = list(loop.body.body)
    names = list(dict.fromkeys(name for name, _, _ in found))
    sibling = found[0][2]
    at = 0
    if len(tree.body) == len(body):  # statements map one to one: put the move after the sibling's own
        own = sibling.func.value.id
        at = next((k + 1 for k, stmt in enumerate(tree.body) if isinstance(stmt, ast.Assign)
                   and any(n is sibling for n in ast.walk(stmt.value))
                   and own in {n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}), 0)
    added = [h.stmt(_move_line(name, sibling)) for name in names]
    moved.extend(names)
    return loop.with_changes(body=loop.body.with_changes(body=[*body[:at], *added, *body[at:]]))
