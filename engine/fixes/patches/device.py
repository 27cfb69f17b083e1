"""D3: take the GPU from LOCAL_RANK, not from the global rank or a hard-coded cuda:0."""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.ranks import pins_visible_devices

_GLOBAL_RANK = {"rank", "global_rank", "world_rank"}


def _local_rank_var(module: cst.Module) -> str | None:
    """The variable this file already reads LOCAL_RANK into, if any."""
    for assign in h.m.findall(module, h.m.Assign()):
        if "LOCAL_RANK" in h.code(assign.value) and len(assign.targets) == 1:
            name = h.dotted(assign.targets[0].target)
            if name:
                return name
    return None


def _is_global_rank(e: cst.BaseExpression) -> bool:
    name = h.dotted(e)
    if name and h.last(name) in _GLOBAL_RANK:
        return True
    if isinstance(e, cst.Call):
        if h.last(h.call_name(e)) == "get_rank":
            return True
        text = h.code(e)
        return ('"RANK"' in text or "'RANK'" in text) and "LOCAL_RANK" not in text
    return False


def _cuda_string(e: cst.BaseExpression) -> bool:
    """"cuda:0", or f"cuda:{rank}" with the global rank."""
    if isinstance(e, cst.SimpleString):
        return e.evaluated_value in ("cuda:0",)
    if isinstance(e, cst.FormattedString):
        parts = e.parts
        return (len(parts) == 2 and isinstance(parts[0], cst.FormattedStringText) and parts[0].value == "cuda:"
                and isinstance(parts[1], cst.FormattedStringExpression) and _is_global_rank(parts[1].expression))
    return False


def device_from_local_rank(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)
    if pins_visible_devices(text):
        raise NotApplicable(f"{path}: sets CUDA_VISIBLE_DEVICES itself, so each process sees its one GPU as cuda:0; "
                            "a device index from the local rank would name a GPU it cannot see")
    if any(h.last(h.call_name(c)) in ("spawn", "start_processes") for c in h.calls(module)):
        raise NotApplicable(f"{path}: starts its ranks with mp.spawn, where the rank given to each process is "
                            "its local rank on one node; D3's fix is for launcher-started scripts")
    # a `local_rank` of the file's own that is not read from LOCAL_RANK (argparse's --local_rank, -1 under torchrun,
    # which passes no such argument) is not reused: set_device(-1) does nothing and every rank stays on cuda:0
    taken = h.variable_names(module)
    var = _local_rank_var(module) or next(n for n in ("local_rank", "env_local_rank", "local_rank_from_env",
                                                      *(f"local_rank_{k}" for k in range(len(taken) + 1)))
                                          if n not in taken)
    name = h.expr(var)
    fstring = h.expr(f'f"cuda:{{{var}}}"')
    changed: list[str] = []

    def fix(call: cst.Call):
        # `.cuda(rank)` on a call's result has no dotted name: its attribute is the method
        tail = call.func.attr.value if isinstance(call.func, cst.Attribute) else h.last(h.call_name(call))
        args = list(call.args)
        if tail == "device" and len(args) >= 2 and isinstance(args[0].value, cst.SimpleString) \
                and args[0].value.evaluated_value == "cuda" and _is_global_rank(args[1].value):
            changed.append("device")  # torch.device("cuda", RANK)
            return call.with_changes(args=[args[0], args[1].with_changes(value=name), *args[2:]])
        if tail == "set_device" and args and (_is_global_rank(args[0].value) or _cuda_string(args[0].value)
                                               or h.code(args[0].value) == "0"):
            changed.append("set_device")
            return call.with_changes(args=[args[0].with_changes(value=name), *args[1:]])
        if tail in ("device", "to", "cuda") and args and args[0].keyword is None:
            if _cuda_string(args[0].value):
                changed.append(tail)
                return call.with_changes(args=[args[0].with_changes(value=fstring), *args[1:]])
            if tail in ("to", "cuda") and _is_global_rank(args[0].value):
                changed.append(tail)
                return call.with_changes(args=[args[0].with_changes(value=name), *args[1:]])
        new_args, touched = [], False
        for a in args:
            kw = a.keyword.value if a.keyword is not None else None
            if kw == "device_ids" and isinstance(a.value, cst.List) and len(a.value.elements) == 1 \
                    and (_is_global_rank(a.value.elements[0].value) or h.code(a.value.elements[0].value) == "0"):
                a = a.with_changes(value=a.value.with_changes(elements=[a.value.elements[0].with_changes(value=name)]))
                touched = True
            elif kw in ("output_device",) and _is_global_rank(a.value):
                a = a.with_changes(value=name)
                touched = True
            elif kw in ("map_location", "device") and _cuda_string(a.value):
                a = a.with_changes(value=fstring)
                touched = True
            new_args.append(a)
        if touched:
            changed.append(tail)
            return call.with_changes(args=new_args)
        return None

    module = h.replace_calls(module, fix)

    class _Literal(cst.CSTTransformer):  # `device = "cuda:0"` and the like, outside calls
        def leave_SimpleString(self, original, updated):
            if updated.evaluated_value == "cuda:0":
                changed.append("literal")
                return fstring
            return updated

    module = module.visit(_Literal())
    if not changed:
        raise NotApplicable(f"{path}: no device chosen from the global rank or hard-coded to cuda:0")
    if _local_rank_var(module) is None:
        module = h.define_before_use(module, var, f'{var} = int(os.environ["LOCAL_RANK"])')
        module = h.add_import(module, "import os", "os")
    return module.code, ["each process now takes the GPU of its LOCAL_RANK (set by torchrun) on its own node"]
