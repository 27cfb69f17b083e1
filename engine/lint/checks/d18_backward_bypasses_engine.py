"""D18: a loop around a DeepSpeed engine that calls loss.backward() itself, bypassing engine.backward(loss).

`deepspeed.initialize` returns an engine whose backward() scales the loss for fp16, divides it for accumulation and
drives ZeRO's gradient reduction, and whose step() steps the optimizer at accumulation boundaries. A bare
`loss.backward()` skips all of it: under ZeRO 1-2 the reduction hooks see gradients they were never prepared for
(an IndexError in the ipg bucket, or an assertion), and otherwise the replicas drift apart.
"""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit
from gpudoctor.engine.lint.script import dotted

INITIALIZE = "deepspeed.initialize"  # init_inference builds no training engine: it has no backward to bypass


def engine_names(script) -> tuple[set[str], set[str]]:
    """(names of the engines deepspeed.initialize returned, names of the optimizers passed to or returned by it)."""
    engines: set[str] = set()
    optimizers: set[str] = set()
    for names, value in script.assigns:
        if not (isinstance(value, ast.Call) and script.resolve(dotted(value.func)) == INITIALIZE):
            continue
        engines.add(names[0])
        if len(names) > 1:
            optimizers.add(names[1])
        for kw in value.keywords:
            if kw.arg == "optimizer" and isinstance(kw.value, ast.Name):
                optimizers.add(kw.value.id)
    return engines, optimizers


def bare_backwards(script, engines: set[str]) -> list:
    """(site, engine) for each `x.backward()` with no argument whose receiver is not an engine (a loss tensor's own
    backward), where an engine's name is in scope: a function that never sees the engine is not its loop."""
    out = []
    for s in script.calls:
        if not (s.attr == "backward" and not s.node.args and not s.node.keywords
                and isinstance(s.node.func, ast.Attribute) and dotted(s.node.func.value) not in engines
                and (s.recv_last or "") not in engines and "scaler" not in ast.unparse(s.node.func.value)):
            continue
        engine = next((e for e in sorted(engines) if _in_scope(script, s, e)), None)
        if engine is not None:
            out.append((s, engine))
    return out


def _binds(stmts, engine: str) -> bool:
    """Whether an assignment among stmts (not inside a nested function or class) binds the name."""
    todo = list(stmts)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign) and any(isinstance(n, ast.Name) and n.id == engine
                                                for t in node.targets for n in ast.walk(t)):
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False


def _in_scope(script, site, engine: str) -> bool:
    """The engine's name means the engine at the site: bound in its function (or a parameter), or at module level."""
    func = site.func
    if func is not None:
        params = [a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)]
        if engine in params or _binds(func.body, engine):
            return True
    return _binds(script.tree.body, engine)


class BackwardBypassesEngine(Check):
    code = "D18"
    slug = "backward-bypasses-engine"
    severity = "error"
    summary = "loss.backward() beside a DeepSpeed engine: no loss scaling, accumulation or ZeRO gradient reduction"

    def find(self, script):
        engines, _ = engine_names(script)
        if not engines:
            return
        for site, engine in bare_backwards(script, engines):
            loss = ast.unparse(site.node.func.value)
            yield Hit(site.line, site.node.col_offset,
                      f"{loss}.backward() bypasses the DeepSpeed engine ({engine} from deepspeed.initialize): no loss "
                      f"scaling, accumulation or ZeRO gradient reduction; call {engine}.backward({loss}) and "
                      f"{engine}.step()")
