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


def unpacked_first(loop: ast.For) -> list[str]:
    """The names `for batch in loader:` unpacks on the first line of its body (`inputs, labels = batch`)."""
    first = loop.body[0] if loop.body else None
    if (isinstance(loop.target, ast.Name) and isinstance(first, ast.Assign) and len(first.targets) == 1
            and isinstance(first.value, ast.Name) and first.value.id == loop.target.id):
        return loop_names(first.targets[0])
    return []


def _is_loss_call(call: ast.Call) -> bool:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return any(word in name.lower() for word in LOSS_WORDS)


def left_targets(loop: ast.For):
    """(name, the loss call it reaches unmoved, the move of a sibling) for each batch name a loop leaves on the CPU."""
    names = loop_names(loop.target) or unpacked_first(loop)
    if len(names) < 2 or not over_batches(loop.iter):
        return
    moves: dict[str, ast.Call] = {}  # name -> its first `name.to(...)` / `name.cuda(...)`
    reassigned: set[str] = set()
    calls: list[ast.Call] = []
    for node in ast.walk(ast.Module(body=loop.body, type_ignores=[])):  # one pass over the body
        if isinstance(node, ast.Call):
            calls.append(node)
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in MOVES and isinstance(func.value, ast.Name):
                moves.setdefault(func.value.id, node)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            reassigned |= {t.id for t in targets if isinstance(t, ast.Name)}
    sibling = next((moves[n] for n in names if n in moves), None)
    if sibling is None:
        return  # nothing moved: a CPU loop, or a model that moves its own inputs
    losses = [c for c in calls if _is_loss_call(c)]
    for name in names:
        if name in moves or name in reassigned:
            continue
        call = next((c for c in losses if any(isinstance(a, ast.Name) and a.id == name
                                               for a in [*c.args, *(k.value for k in c.keywords)])), None)
        if call is not None:
            yield name, call, sibling


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
