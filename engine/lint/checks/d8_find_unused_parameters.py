"""D8: find_unused_parameters=True costs a graph walk every step and can hide a real bug (a note); beside reentrant
activation checkpointing it makes DDP see a parameter's gradient twice (a warning)."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

# torch.utils.checkpoint's functions, reentrant unless told otherwise (torch 1.x-2.x default use_reentrant=True),
# and transformers' switch, whose kwargs reach them
_CHECKPOINT_FUNCS = ("checkpoint", "checkpoint_sequential")


def _is_false(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def _reentrant(site) -> bool:
    """A checkpointing call that runs (or lets transformers run) torch's reentrant checkpoint."""
    call = site.node
    if site.attr in _CHECKPOINT_FUNCS and site.name and site.name.startswith("torch.utils.checkpoint"):
        return not _is_false(_kw(call, "use_reentrant"))
    if site.attr == "gradient_checkpointing_enable":
        kwargs = _kw(call, "gradient_checkpointing_kwargs")
        if isinstance(kwargs, ast.Dict):
            return not any(isinstance(k, ast.Constant) and k.value == "use_reentrant" and _is_false(v)
                           for k, v in zip(kwargs.keys, kwargs.values))
        return kwargs is None
    return False


class FindUnusedParameters(Check):
    code = "D8"
    slug = "find-unused-parameters"
    severity = "note"
    summary = "find_unused_parameters=True: an extra traversal every iteration; use only if parameters go unused"

    def find(self, script):
        flagged = []
        for site in script.calls:
            for kw in site.node.keywords:
                if kw.arg == "find_unused_parameters" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                    flagged.append(kw.value)
                    yield Hit(kw.value.lineno, kw.value.col_offset,
                              "find_unused_parameters=True walks the autograd graph every iteration; keep it only if "
                              "some parameters really get no gradient (and then find out why)")
        for s in script.strings:
            value = getattr(s.node, "value", None)
            if value == "ddp_find_unused_parameters_true":
                flagged.append(s.node)
                yield Hit(s.node.lineno, s.node.col_offset,
                          "strategy ddp_find_unused_parameters_true walks the autograd graph every iteration; "
                          "keep it only if some parameters really get no gradient")
        static = any(kw.arg == "static_graph" and isinstance(kw.value, ast.Constant) and kw.value.value is True
                     for site in script.calls for kw in site.node.keywords)
        if not flagged or static:
            return
        for site in script.calls:
            if _reentrant(site):
                yield Hit(site.line, site.node.col_offset,
                          "reentrant activation checkpointing with find_unused_parameters=True: backward re-runs the "
                          "checkpointed forward and DDP sees a parameter ready twice (\"Expected to mark a variable "
                          "ready only once\"); pass use_reentrant=False, or static_graph=True to DDP",
                          severity="warning")
