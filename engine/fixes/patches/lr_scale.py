"""D11's patch: the learning rate of each optimizer a DDP script builds, scaled with the number of processes, since
the effective batch grew with them (linear by default, --param lr_scaling=sqrt for the square-root rule)."""
from __future__ import annotations

import re

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable

# torch.optim's optimizers and the usual third-party ones (apex, bitsandbytes, transformers, timm, lion-pytorch)
OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
                        "SparseAdam", "ASGD", "Rprop", "LBFGS", "Adafactor", "FusedAdam", "FusedLAMB", "Lamb", "LAMB",
                        "Lion", "AdamW8bit", "Adam8bit", "PagedAdamW", "PagedAdamW8bit"})
# an lr that already follows the job's size: world_size, get_world_size(), num_processes, a scaled_lr name
SCALED = re.compile(r"world_size|get_world_size|num_processes|num_replicas|num_gpus|n_gpu|ngpus|scaled?_lr|lr_scaled")
RULES = ("linear", "sqrt")
# schedulers that set the lr themselves from their own arguments: scaled with the optimizer, or they undo it
SCHEDULERS = {"OneCycleLR": ("max_lr",), "CyclicLR": ("base_lr", "max_lr")}


def _built_before_init(text: str) -> list[bool]:
    """For each optimizer or scheduler call in source order: whether it comes before the file's first
    init_process_group call (module-level code above it, or earlier in the same function)."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))

    def name(n: ast.Call) -> str:
        f = n.func
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""

    init = next((n.lineno for n in calls if name(n) == "init_process_group"), None)
    return [init is not None and n.lineno < init for n in calls if name(n) in OPTIMIZERS or name(n) in SCHEDULERS]


def _group_lrs(value: cst.BaseExpression) -> list:
    """The `"lr": ...` elements of the param-group dicts in an optimizer's first argument (a list of dicts)."""
    if not isinstance(value, (cst.List, cst.Tuple)):
        return []
    out = []
    for element in value.elements:
        if isinstance(element.value, cst.Dict):
            out += [e for e in element.value.elements if isinstance(e, cst.DictElement)
                    and isinstance(e.key, cst.SimpleString) and e.key.evaluated_value == "lr"
                    and not SCALED.search(h.code(e.value))]
    return out


def lr_scale_world_size(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """`torch.optim.X(params, lr=E)` becomes `lr=E * dist.get_world_size()` (or `* math.sqrt(...)`), for each
    optimizer of a DDP script whose lr does not already follow the world size. The lr may be a keyword or the second
    positional argument, as torch.optim's signatures allow."""
    rule = str(facts.get("lr_scaling") or "linear").strip().lower()
    if rule not in RULES:
        raise NotApplicable(f"{path}: lr_scaling must be linear or sqrt (got {rule!r})")
    h.require_ddp(text, path, ": without DDP the batch does not grow with the GPUs")
    module = h.parse(text, path)
    dist = h.dist_alias(module)
    before_init = _built_before_init(text)
    env_size = 'int(os.environ.get("WORLD_SIZE", 1))'
    scaled: list[str] = []
    already: list[str] = []
    from_env: list[str] = []
    seen = [0]

    def times(value: cst.BaseExpression, size: str) -> cst.BaseExpression:
        if isinstance(value, (cst.BinaryOperation, cst.IfExp, cst.BooleanOperation, cst.Lambda)):
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        factor = size if rule == "linear" else f"math.sqrt({size})"
        return cst.BinaryOperation(left=value, operator=cst.Multiply(), right=h.expr(factor))

    def fix(call: cst.Call):
        name = h.last(h.call_name(call))
        if name not in OPTIMIZERS and name not in SCHEDULERS:
            return None
        k = seen[0]
        seen[0] += 1
        # built before init_process_group: dist.get_world_size() would raise there; the launcher's WORLD_SIZE will not
        size = env_size if k < len(before_init) and before_init[k] else f"{dist}.get_world_size()"
        if name in SCHEDULERS:  # a schedule that sets the lr itself (OneCycleLR's max_lr) would undo the optimizer's
            args = [a.with_changes(value=times(a.value, size)) if a.keyword is not None and a.keyword.value
                    in SCHEDULERS[name] and not SCALED.search(h.code(a.value)) else a for a in call.args]
            if args != list(call.args):
                scaled.append(f"{name}({', '.join(SCHEDULERS[name])})")
                from_env.extend([name] if size == env_size else [])
            return call.with_changes(args=args)
        arg = h.kwarg(call, "lr")
        if arg is None and len(call.args) > 1 and call.args[1].keyword is None and not call.args[1].star:
            arg = call.args[1]
        args = list(call.args)
        groups = _group_lrs(args[0].value) if args and args[0].keyword is None else []
        if arg is None and not groups:
            return None  # the optimizer's default lr: nothing the user tuned to scale
        if arg is not None and SCALED.search(h.code(arg.value)):
            already.append(name)
            return None
        if groups:  # [{"params": ..., "lr": LR * 10}, ...]: each group's own lr, so their ratio stays
            value = args[0].value
            for g in groups:
                value = value.deep_replace(g, g.with_changes(value=times(g.value, size)))
            args[0] = args[0].with_changes(value=value)
        if arg is not None:
            scaled.append(f"{name}(lr={h.code(arg.value)})")
            args = [a.with_changes(value=times(a.value, size)) if a is arg else a for a in args]
        else:
            scaled.append(f"{name}(param groups' lr)")
        if size == env_size:
            from_env.append(name)
        return call.with_changes(args=args)

    module = h.replace_calls(module, fix)
    if not scaled:
        raise NotApplicable(f"{path}: no optimizer with an lr to scale"
                            + (f" ({', '.join(dict.fromkeys(already))} already follow the world size)" if already else ""))
    if rule == "sqrt":
        module = h.add_import(module, "import math", "math")
    if from_env:
        module = h.add_import(module, "import os", "os")
    if dist == "torch.distributed":
        module = h.add_import(module, "import torch.distributed", "torch.distributed")
    how = "the number of processes" if rule == "linear" else "the square root of the number of processes"
    return module.code, [
        f"{', '.join(scaled)}: the learning rate is now multiplied by {how}, as the effective batch is the per-GPU "
        "batch times the number of processes",
        *([f"{', '.join(dict.fromkeys(from_env))} {'is' if len(set(from_env)) == 1 else 'are'} built before "
           "init_process_group: the world size is read from the WORLD_SIZE the launcher sets (torchrun, deepspeed, "
           "accelerate)"] if from_env else []),
        "a large effective batch wants a warmup, and with Adam "
        "the square-root rule (--param lr_scaling=sqrt) is the gentler start. To reproduce a single-GPU run instead, "
        "leave the lr and divide the per-GPU batch by the number of processes",
    ]
