"""P4: a training loop moves the batch's inputs to the GPU but hands its targets to the loss where the loader left
them (on the CPU): "Expected all tensors to be on the same device ... cpu"."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

MOVES = ("to", "cuda")
# a loss as scripts name it: criterion(...), loss_fn(...), F.cross_entropy(...), nn.functional.kl_div(...)
LOSS_WORDS = ("loss", "criterion", "crit", "entropy", "kl_div")


# what a loop over batches iterates, unwrapped from enumerate()/tqdm(): a loader, a dataset, an iterator of batches
BATCH_SOURCES = ("loader", "dl", "dataset", "batches", "data_iter", "iterator")


def over_batches(iterable: ast.AST) -> bool:
    while isinstance(iterable, ast.Call) and iterable.args and ast.unparse(iterable.func).rsplit(".", 1)[-1] in (
            "enumerate", "tqdm", "iter", "track"):
        iterable = iterable.args[0]
    if not isinstance(iterable, (ast.Name, ast.Attribute)):
        return False
    last = ast.unparse(iterable).rsplit(".", 1)[-1].lower()
    return any(word in last for word in BATCH_SOURCES)


def loop_names(target: ast.AST) -> list[str]:
    """The names a for loop unpacks per batch: `x, y`, `i, (x, y)`, `(x, y)`; a single name is a whole batch."""
    if isinstance(target, ast.Tuple):
        names = []
        for elt in target.elts:
            if isinstance(elt, ast.Tuple):
                names += [e.id for e in elt.elts if isinstance(e, ast.Name)]
            elif isinstance(elt, ast.Name):
                names.append(elt.id)
        return names
    return []


def moved(node: ast.AST, name: str) -> ast.Call | None:
    """The first `name.to(...)` / `name.cuda(...)` call under node."""
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in MOVES \
                and isinstance(call.func.value, ast.Name) and call.func.value.id == name:
            return call
    return None


def _is_loss_call(call: ast.Call) -> bool:
    return any(word in ast.unparse(call.func).lower().rsplit(".", 1)[-1] for word in LOSS_WORDS)


def left_targets(loop: ast.For):
    """(name, the loss call it reaches unmoved, the move of a sibling) for each batch name a loop leaves on the CPU."""
    names = loop_names(loop.target)
    if len(names) < 2 or not over_batches(loop.iter):
        return
    body = ast.Module(body=loop.body, type_ignores=[])
    moves = {n: moved(body, n) for n in names}
    sibling = next((m for m in moves.values() if m is not None), None)
    if sibling is None:
        return  # nothing moved: a CPU loop, or a model that moves its own inputs
    reassigned = {t.id for node in ast.walk(body) if isinstance(node, (ast.Assign, ast.AugAssign))
                  for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    for name in names:
        if moves[name] is not None or name in reassigned:
            continue
        for call in ast.walk(body):
            if isinstance(call, ast.Call) and _is_loss_call(call) and any(
                    isinstance(a, ast.Name) and a.id == name for a in [*call.args, *(k.value for k in call.keywords)]):
                yield name, call, sibling
                break


class TargetLeftOnCPU(Check):
    code = "P4"
    slug = "target-left-on-cpu"
    severity = "error"
    summary = "the loop moves the inputs to the GPU but passes the targets to the loss unmoved (still on the CPU)"

    def find(self, script):
        for loop in script.index.of(ast.For):
            by_call: dict[int, list] = {}
            for name, call, sibling in left_targets(loop):
                by_call.setdefault(id(call), [call, sibling, []])[2].append(name)
            for call, sibling, names in by_call.values():
                shown = ", ".join(f"`{n}`" for n in names)
                yield Hit(call.lineno, call.col_offset,
                          f"{shown} reach{'es' if len(names) == 1 else ''} {ast.unparse(call.func)}() where the "
                          f"loader left {'it' if len(names) == 1 else 'them'} (the CPU) while the loop moves a "
                          f"sibling with `{ast.unparse(sibling)}`: Expected all tensors to be on the same device; "
                          "move them the same way")
