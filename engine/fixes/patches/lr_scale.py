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
    size = f"{dist}.get_world_size()"
    factor = size if rule == "linear" else f"math.sqrt({size})"
    scaled: list[str] = []
    already: list[str] = []

    def fix(call: cst.Call):
        name = h.last(h.call_name(call))
        if name not in OPTIMIZERS:
            return None
        arg = h.kwarg(call, "lr")
        if arg is None and len(call.args) > 1 and call.args[1].keyword is None and not call.args[1].star:
            arg = call.args[1]
        if arg is None:
            return None  # the optimizer's default lr: nothing the user tuned to scale
        if SCALED.search(h.code(arg.value)):
            already.append(name)
            return None
        value = arg.value
        if isinstance(value, (cst.BinaryOperation, cst.IfExp, cst.BooleanOperation, cst.Lambda)):
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        scaled.append(f"{name}(lr={h.code(arg.value)})")
        new = cst.BinaryOperation(left=value, operator=cst.Multiply(), right=h.expr(factor))
        return call.with_changes(args=[a.with_changes(value=new) if a is arg else a for a in call.args])

    module = h.replace_calls(module, fix)
    if not scaled:
        raise NotApplicable(f"{path}: no optimizer with an lr to scale"
                            + (f" ({', '.join(dict.fromkeys(already))} already follow the world size)" if already else ""))
    if rule == "sqrt":
        module = h.add_import(module, "import math", "math")
    if dist == "torch.distributed":
        module = h.add_import(module, "import torch.distributed", "torch.distributed")
    how = "the number of processes" if rule == "linear" else "the square root of the number of processes"
    return module.code, [
        f"{', '.join(scaled)}: the learning rate is now multiplied by {how}, as the effective batch is the per-GPU "
        "batch times the number of processes",
        "the optimizer must be built after init_process_group; a large effective batch wants a warmup, and with Adam "
        "the square-root rule (--param lr_scaling=sqrt) is the gentler start. To reproduce a single-GPU run instead, "
        "leave the lr and divide the per-GPU batch by the number of processes",
    ]
