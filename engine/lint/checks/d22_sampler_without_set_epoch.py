"""D22: a shuffling DistributedSampler whose set_epoch is never called repeats one order every epoch."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit


class SamplerWithoutSetEpoch(Check):
    code = "D22"
    slug = "sampler-without-set-epoch"
    severity = "error"
    summary = "DistributedSampler(shuffle=True) without sampler.set_epoch(epoch): the same order every epoch"

    def find(self, script):
        if not any(_epoch_loop(node) for node, _ in script.loops):
            return  # no epoch loop here: whoever iterates the epochs (a trainer, another file) calls set_epoch
        subclasses = script.class_names
        sites = [site for site in script.calls if site.attr == "DistributedSampler" and site.attr not in subclasses]
        reached = _reached(script, sites)
        for site in sites:
            if reached is None or id(site) in reached:
                continue  # set_epoch is called on this sampler (or on one this file cannot tell apart)
            shuffle = next((k.value for k in site.node.keywords if k.arg == "shuffle"), None)
            if shuffle is None and len(site.node.args) >= 4:
                shuffle = site.node.args[3]
            if isinstance(shuffle, ast.Constant) and not shuffle.value:
                continue
            if _evaluation_only(script, site):
                continue  # the order of an evaluation pass does not matter
            yield Hit(site.line, site.node.col_offset,
                      "DistributedSampler shuffles with a seed that only changes through set_epoch(), which this "
                      f"file never calls{' for this sampler' if reached else ''}: every epoch sees the same order; "
                      "call sampler.set_epoch(epoch) at the start of each epoch")


COUNTERS = ("range", "trange", "count")  # what an epoch loop counts with, also inside tqdm(...) or enumerate(...)
WRAPPERS = ("tqdm", "enumerate")


def _epoch_loop(node) -> bool:
    """This file runs the epochs itself: `for epoch in range(...)` (also `tqdm(range(n))`, `itertools.count()`, or a
    loop over anything named for epochs), or a loop of either kind around an inner `for` over the batches (`while
    step < max_steps:`). fixes/patches/loops.py patches the same loops."""
    inner = any(isinstance(n, (ast.For, ast.AsyncFor)) for child in node.body for n in ast.walk(child))
    if isinstance(node, ast.While):
        return inner or "epoch" in ast.unparse(node.test).lower()
    if "epoch" in (ast.unparse(node.target) + " " + ast.unparse(node.iter)).lower():
        return True
    call = node.iter
    while isinstance(call, ast.Call) and _name(call.func) in WRAPPERS and call.args:
        call = call.args[0]
    return inner and isinstance(call, ast.Call) and _name(call.func) in COUNTERS


def _reached(script, sites) -> set[int] | None:
    """The ids of the sampler sites whose set_epoch this file calls, by the sampler's name or its loader's
    (`train_sampler.set_epoch`, `train_loader.sampler.set_epoch`); None when a set_epoch is called on something it
    cannot match to one of them (`s.set_epoch` over a list, a sampler built elsewhere): then every sampler counts as
    reached, as one set_epoch anywhere used to make them all."""
    receivers = {ast.unparse(n.func.value) for n in ast.walk(script.tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "set_epoch"}
    if not receivers:
        return set()
    names: dict[int, set[str]] = {}
    for site in sites:
        own = {t for targets, value in script.assigns if value is site.node for t in targets}
        loaders = {t for targets, value in script.assigns if isinstance(value, ast.Call)
                   and _name(value.func) == "DataLoader" for k in value.keywords
                   if k.arg in ("sampler", "batch_sampler") and (ast.unparse(k.value) in own or k.value is site.node)
                   for t in targets}
        names[id(site)] = own | {f"{loader}.sampler" for loader in loaders} | \
            {f"{loader}.batch_sampler.sampler" for loader in loaders}
    known = set().union(*names.values()) if names else set()
    if not receivers <= known:
        return None
    return {key for key, held in names.items() if held & receivers}


def _name(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _evaluation_only(script, site) -> bool:
    """The sampler (or the loader it is passed to) is named for validation or test data."""
    words = ("val", "eval", "test", "dev")
    for targets, value in script.assigns:
        if value.lineno <= site.line <= (value.end_lineno or value.lineno) and value.col_offset <= site.node.col_offset \
                or value is site.node:
            if any(any(w in t.lower() for w in words) for t in targets):
                return True
    args = " ".join(ast.unparse(a) for a in site.node.args[:1]).lower()
    return any(w in args for w in words)
