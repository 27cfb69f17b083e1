"""Accumulation patch: P6, the micro-steps of a DDP training loop that accumulates gradients run under no_sync().

    for i, (x, y) in enumerate(loader):                for i, (x, y) in enumerate(loader):
        loss = crit(model(x), y) / accum                   with (contextlib.nullcontext() if (i + 1) % accum == 0
        loss.backward()                         ->               else model.no_sync()):
        if (i + 1) % accum == 0:                               loss = crit(model(x), y) / accum
            optimizer.step()                                   loss.backward()
                                                           if (i + 1) % accum == 0:
                                                               optimizer.step()

The forward must sit inside the context as well as the backward: DDP decides in forward() whether the next backward
reduces. The step's own condition, copied as written, picks the micro-batch that reduces, so the loop still
all-reduces exactly once per optimizer step.
"""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.checks.p6_accumulation_without_no_sync import ACCUM_TEST, optimizer_receiver

# what already stops the per-micro-step reduction (as the lint's P6 check reads it)
HANDLED = ("no_sync", "require_backward_grad_sync", "set_requires_gradient_sync", ".accumulate(")
# wrappers that own the loop's synchronisation: their scripts are not patched here
WRAPPERS = ("deepspeed", "accelerate", "lightning", "pytorch_lightning")
SAFE_CALLS = {"len", "int", "min", "max"}  # calls a condition may hold and still be evaluated twice


def _is_backward(stmt) -> bool:
    """A backward() call, on a name or on a call's result (`scaler.scale(loss).backward()`)."""
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward" for c in h.calls(stmt))


def _optimizer_step(node) -> bool:
    """An optimizer's (or a grad scaler's) step() somewhere under node; a scheduler's does not count."""
    names = (h.call_name(call) for call in h.calls(node))
    return any(h.last(name) == "step" and "." in name and optimizer_receiver(name.rsplit(".", 1)[0]) for name in names)


def _accumulation_if(stmt) -> bool:
    if not isinstance(stmt, cst.If) or not _optimizer_step(stmt.body):
        return False
    return bool(ACCUM_TEST.search(h.code(stmt.test)))


def _mentions(node, dotted_name: str) -> bool:
    """node reads the name (a plain name, or an attribute chain such as self.model)."""
    if "." not in dotted_name:
        return h.uses_name(node, dotted_name)
    return any(h.dotted(a) == dotted_name for a in h.m.findall(node, h.m.Attribute()))


def _assigned(stmt) -> set[str]:
    """Plain names a statement (re)binds: assignment targets, augmented assignments, loop and with targets."""
    names = set()
    for kind in (h.m.AssignTarget(), h.m.AugAssign(), h.m.AnnAssign(), h.m.For(), h.m.WithItem()):
        for node in h.m.findall(stmt, kind):
            target = getattr(node, "target", None) or getattr(node, "asname", None)
            target = getattr(target, "name", target)  # a WithItem's AsName holds the bound name
            if target is not None:
                names |= {n.value for n in h.m.findall(target, h.m.Name())}
                if isinstance(target, cst.Name):
                    names.add(target.value)
    return names


def _counter_bump(stmt) -> tuple[str, int] | None:
    """`name += N` (a whole number) as a statement line of its own: (name, N), else None."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    aug = stmt.body[0]
    if (isinstance(aug, cst.AugAssign) and isinstance(aug.operator, cst.AddAssign) and isinstance(aug.target, cst.Name)
            and isinstance(aug.value, cst.Integer)):
        return aug.target.value, int(aug.value.value)
    return None


class _ReadAhead(cst.CSTTransformer):
    """A condition read before `n += N` has run, rewritten to the value it has after: n becomes (n + N)."""

    def __init__(self, counted: dict[str, int]):
        super().__init__()
        self.counted = counted

    def visit_Attribute(self, node) -> bool:
        return False  # obj.step is not the counter step

    def leave_Name(self, original, updated):
        bump = self.counted.get(updated.value)
        if bump is None:
            return updated
        return h.expr(f"({updated.value} + {bump})")


def _plan_loop(body: list, models: list[str]) -> tuple[int, int, cst.BaseExpression, str] | str:
    """(first, last) statement indexes to wrap, the condition that picks the reducing micro-batch as it reads at
    the forward, and the model's name; or why the loop is left."""
    backward = next((k for k, s in enumerate(body) if _is_backward(s)), None)
    if backward is None:
        return "no backward()"
    step = next((k for k in range(backward + 1, len(body)) if _accumulation_if(body[k])), None)
    if step is None:
        return "no accumulation step after the backward"
    test = body[step].test
    if any(h.call_name(c) not in SAFE_CALLS for c in h.calls(test)):
        return f"the step's condition `{h.code(test)}` calls a function, and would run twice"
    reads = h.variable_names(test)
    counted: dict[str, int] = {}  # `step += 1` between the backward and the step: read ahead in the context
    for k in range(backward, step):
        changed = _assigned(body[k]) & reads
        if not changed:
            continue
        bump = _counter_bump(body[k])
        if bump is None or bump[0] not in changed or bump[0] in counted or k == backward:
            return f"the step's condition `{h.code(test)}` changes between the backward and the step"
        counted[bump[0]] = bump[1]
    if counted:
        test = test.visit(_ReadAhead(counted))
    first = 0
    for k in range(backward):
        if _assigned(body[k]) & reads:
            first = k + 1  # the condition is read after its last change
    for k in range(first, backward + 1):  # the region opens at the forward: the data's move stays outside
        model = next((name for name in models if _mentions(body[k], name)), None)
        if model is not None:
            return k, backward, test, model
    return "no forward of the DDP model before the backward, after the condition's last change"


def accumulation_no_sync(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    h.require_ddp(text, path)
    if any(word in text for word in HANDLED):
        raise NotApplicable(f"{path}: the micro-steps already skip synchronisation (no_sync or its equivalents)")
    module = h.parse(text, path)
    if h.imported_modules(module) & set(WRAPPERS):
        raise NotApplicable(f"{path}: a wrapper (DeepSpeed, Accelerate, Lightning) owns the accumulation")
    models = h.ddp_names(module)
    if not models:
        raise NotApplicable(f"{path}: no `model = DDP(...)` whose reduction could be deferred")
    done: list[str] = []
    why: list[str] = []

    def rewrite(stmts, block):
        out = []
        for s in stmts:
            if not isinstance(s, (cst.For, cst.While)) or done or not isinstance(s.body, cst.IndentedBlock):
                out.append(s)
                continue
            body = list(s.body.body)
            plan = _plan_loop(body, models)
            if isinstance(plan, str):
                if any(_is_backward(x) for x in body):
                    why.append(plan)
                out.append(s)
                continue
            first, last, test, model = plan
            context = h.expr(f"(contextlib.nullcontext() if {h.code(test)} else {model}.no_sync())")
            wrapped = body[first:last + 1]
            with_stmt = cst.With(
                items=[cst.WithItem(item=context)], body=cst.IndentedBlock(body=[
                    wrapped[0].with_changes(leading_lines=()), *wrapped[1:]]),
                leading_lines=wrapped[0].leading_lines)
            done.append(model)
            out.append(s.with_changes(body=s.body.with_changes(body=[*body[:first], with_stmt, *body[last + 1:]])))
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not done:
        detail = f" ({why[0]})" if why else ""
        raise NotApplicable(f"{path}: no training loop that steps the optimizer every N micro-batches{detail}")
    module = h.add_import(module, "import contextlib", "contextlib")
    return module.code, [f"the micro-steps between optimizer steps now run inside `{done[0]}.no_sync()`: gradients "
                         "add up locally and are all-reduced once, on the micro-batch that steps; forward and "
                         "backward both sit inside, since DDP decides in forward whether the backward reduces"]
