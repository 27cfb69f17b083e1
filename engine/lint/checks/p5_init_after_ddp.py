"""P5: weights (re-)initialised after DDP wrapped the model: each rank draws its own, and DDP never re-syncs them.

DDP broadcasts rank 0's parameters once, in its constructor; afterwards it only averages gradients. An init run on
the wrapped model (model.apply(init_weights), model.module.reset_parameters(), nn.init.*(model.module.fc.weight))
draws from each rank's own generator, so the replicas start, and stay, different."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

DDP_NAMES = ("DistributedDataParallel", "DDP")
RESETS = ("reset_parameters", "init_weights", "_init_weights", "initialize_weights", "weights_init")


# a model moved or cast on its way into DDP is still that model: DDP(model.to(device)), DDP(model.cuda())
_MOVES = ("to", "cuda", "cpu", "half", "float", "double", "bfloat16")


def _model_root(node: ast.AST) -> str | None:
    """`model` for model, model.to(device), model.cuda().half(); None for anything else (a new Net())."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MOVES:
        node = node.func.value
    return node.id if isinstance(node, ast.Name) else None


def wraps(stmt: ast.stmt) -> tuple[str, str] | None:
    """(wrapped name, model name) for `wrapped = DDP(model, ...)` (also DDP(model.to(device)), DDP(module=model))."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call) and ast.unparse(stmt.value.func).rsplit(".", 1)[-1] in DDP_NAMES):
        return None
    call = stmt.value
    first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "module"), None)
    model = _model_root(first) if first is not None else None
    return (stmt.targets[0].id, model) if model is not None else None


def _on(node: ast.AST, wrapped: str) -> bool:
    """node is the wrapped model or reached through it (wrapped.module..., wrapped.fc)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return isinstance(node, ast.Name) and node.id == wrapped


def reinit(stmt: ast.stmt, wrapped: str) -> ast.Call | None:
    """The call in a plain expression statement that re-draws the wrapped model's weights, if it is one."""
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    call = stmt.value
    func = call.func
    if isinstance(func, ast.Attribute) and _on(func.value, wrapped):
        if func.attr in RESETS:
            return call
        if func.attr == "apply" and call.args and any(w in ast.unparse(call.args[0]).lower() for w in ("init", "weight")):
            return call
    name = ast.unparse(func)
    if (".init." in f".{name}" or name.startswith("init.")) and call.args and _on(call.args[0], wrapped):
        return call  # nn.init.xavier_uniform_(model.module.fc.weight)
    return None


def inits_after_wrap(body: list[ast.stmt]):
    """(index of the DDP assignment, index of the init, the init call, wrapped name, model name) in one block."""
    for k, stmt in enumerate(body):
        found = wraps(stmt)
        if found is None:
            continue
        for j in range(k + 1, len(body)):
            call = reinit(body[j], found[0])
            if call is not None:
                yield k, j, call, found[0], found[1]


class InitAfterDDP(Check):
    code = "P5"
    slug = "init-after-ddp"
    severity = "error"
    summary = "weights initialised after DDP(...) wrapped the model: every rank draws its own, never re-synced"

    def find(self, script):
        blocks = [script.tree.body] + [f.body for f in script.index.of(ast.FunctionDef, ast.AsyncFunctionDef)]
        for body in blocks:
            for _, _, call, wrapped, model in inits_after_wrap(body):
                yield Hit(call.lineno, call.col_offset,
                          f"{ast.unparse(call)[:60]} runs after DDP wrapped {model}: DDP copied rank 0's weights "
                          "once, in its constructor, so each rank now holds its own draw and gradient averaging "
                          f"never brings them together; initialise {model} before DDP({model}, ...)")
