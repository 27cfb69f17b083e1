"""P2: DDP wraps the model before it is moved to its GPU."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

MOVES = ("to", "cuda", "to_empty")


class DDPBeforeToDevice(Check):
    code = "P2"
    slug = "ddp-before-to-device"
    severity = "warning"
    summary = "DistributedDataParallel(model) before model.to(device): buckets and buffers built on the CPU"

    def find(self, script):
        for site in script.calls:
            if site.attr not in ("DistributedDataParallel", "DDP") or not site.node.args:
                continue
            arg = site.node.args[0]
            if not isinstance(arg, ast.Name):
                continue  # DDP(model.to(dev)) or DDP(Net().cuda()) moves first
            name = arg.id
            wrapped = _assigned_name(site, script)
            calls = script.calls_in(site.func)
            moved_before = any(s.attr in MOVES and s.recv == name and s.line < site.line for s in calls) or \
                _assigned_moved(script, name, site)
            moved_after = next((s for s in calls if s.attr in MOVES and s.line > site.line
                                and s.recv in (name, wrapped)), None)
            if not moved_before and moved_after is not None:
                yield Hit(site.line, site.node.col_offset,
                          f"{name} is wrapped in DDP here but moved to its device only at line {moved_after.line}: DDP "
                          "records the devices and broadcasts from where the parameters are at construction; "
                          f"move first: DDP({name}.to(device), device_ids=[local_rank])")


def _assigned_name(site, script) -> str | None:
    for targets, value in script.assigns:
        if value is site.node:
            return targets[0]
    return None


def _assigned_moved(script, name, site) -> bool:
    """model = Net().to(device) before the wrap."""
    for targets, value in script.assigns:
        if name in targets and value.lineno < site.line and isinstance(value, ast.Call) and \
                isinstance(value.func, ast.Attribute) and value.func.attr in MOVES:
            return True
    return False
