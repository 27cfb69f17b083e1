"""D15: an FSDP full state dict gathered without offload_to_cpu: every rank assembles the whole model on its GPU."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

SETTERS = ("state_dict_type", "set_state_dict_type")
STATE_CALLS = ("state_dict", "optim_state_dict", "full_optim_state_dict")  # what takes a state dict


def full_without_offload(call: ast.Call) -> bool:
    """FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT[, config]) whose config is absent or a
    FullStateDictConfig(...) written without offload_to_cpu=True; a config passed by name cannot be told."""
    args = list(call.args)
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords:
        return False
    kind = keywords.get("state_dict_type", args[1] if len(args) > 1 else None)
    if kind is None or not ast.unparse(kind).endswith("FULL_STATE_DICT"):
        return False
    config = keywords.get("state_dict_config", args[2] if len(args) > 2 else None)
    if config is None:
        return True
    if not (isinstance(config, ast.Call) and ast.unparse(config.func).endswith("FullStateDictConfig")):
        return False
    offload = {k.arg: k.value for k in config.keywords}.get("offload_to_cpu", config.args[0] if config.args else None)
    return not (isinstance(offload, ast.Constant) and offload.value is True)


def saves(region: list[ast.AST]) -> bool:
    """The region takes a state dict (model.state_dict(), FSDP.optim_state_dict(...)) and loads none: a gather to
    save, not a full state dict being loaded (which runs no gather)."""
    names = {node.func.attr for part in region for node in ast.walk(part)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    return bool(names & set(STATE_CALLS)) and not any(
        "load" in name for name in names)


class FullStateDictOnGPU(Check):
    code = "D15"
    slug = "full-state-dict-on-gpu"
    severity = "warning"
    summary = "FSDP FULL_STATE_DICT without offload_to_cpu: each rank gathers the whole model in GPU memory to save"

    def find(self, script):
        withs = None
        for site in script.calls:
            if site.attr not in SETTERS or not full_without_offload(site.node):
                continue
            if withs is None:  # only in the few scripts that take a full state dict
                withs = {id(item.context_expr): node for node in ast.walk(script.tree) if isinstance(node, ast.With)
                         for item in node.items}
            block = withs.get(id(site.node))
            region = block.body if block is not None else [site.func or script.tree]
            if saves(region):
                yield Hit(site.line, site.node.col_offset,
                          "FULL_STATE_DICT without FullStateDictConfig(offload_to_cpu=True, rank0_only=True): the "
                          "save gathers every parameter onto each rank's GPU and runs out of memory on large "
                          "models; pass that config (or save sharded with torch.distributed.checkpoint)")
