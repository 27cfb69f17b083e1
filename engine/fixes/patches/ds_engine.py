"""D18: a DeepSpeed loop's bare loss.backward() and optimizer.step() handed to the engine: engine.backward(loss),
engine.step(), where the lint finds them (the engine's name in scope at the call)."""
from __future__ import annotations

import ast

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable


def engine_backward(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    from gpudoctor.engine.lint.checks.d18_backward_bypasses_engine import bare_backwards, engine_names
    from gpudoctor.engine.lint.script import Script

    try:
        script = Script(text, path)
    except SyntaxError as exc:
        raise NotApplicable(f"{path}: not valid Python (line {exc.lineno})") from None
    engines, optimizers = engine_names(script)
    if not engines:
        raise NotApplicable(f"{path}: no deepspeed.initialize(...) whose engine a loop could call")
    backward: dict[int, str] = {}  # line -> engine name in scope there
    funcs = set()
    for site, engine in bare_backwards(script, engines):
        backward[site.line] = engine
        funcs.add(site.func)
    if not backward:
        raise NotApplicable(f"{path}: no loss.backward() beside a DeepSpeed engine in the same scope")
    steps = {s.line: backward[next(iter(sorted(backward)))] for s in script.calls
             if s.attr == "step" and s.func in funcs and not s.node.args and isinstance(s.node.func, ast.Attribute)
             and isinstance(s.node.func.value, ast.Name) and s.node.func.value.id in optimizers}
    module = h.parse(text, path)
    wrapper = MetadataWrapper(module)
    positions = wrapper.resolve(PositionProvider)

    class _T(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
            if not isinstance(updated.func, cst.Attribute) or updated.args:
                return updated
            line = positions[original].start.line
            name = updated.func.attr.value
            if name == "backward" and line in backward:
                return cst.Call(func=cst.Attribute(value=cst.Name(backward[line]), attr=cst.Name("backward")),
                                args=[cst.Arg(value=updated.func.value)])
            if name == "step" and line in steps:
                return cst.Call(func=cst.Attribute(value=cst.Name(steps[line]), attr=cst.Name("step")), args=[])
            return updated

    new = wrapper.module.visit(_T())
    notes = ["engine.step() steps the optimizer only at accumulation boundaries and zeroes the gradients; it also "
             "steps an lr_scheduler passed to deepspeed.initialize, so a scheduler stepped by hand beside it steps twice"]
    return new.code, notes
