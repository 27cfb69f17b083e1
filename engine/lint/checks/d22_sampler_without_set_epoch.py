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
        if script.uses("set_epoch") or not any(_epoch_loop(node) for node, _ in script.loops):
            return  # no epoch loop here: whoever iterates the epochs (a trainer, another file) calls set_epoch
        subclasses = script.class_names
        for site in script.calls:
            if site.attr != "DistributedSampler" or site.attr in subclasses:
                continue
            shuffle = next((k.value for k in site.node.keywords if k.arg == "shuffle"), None)
            if shuffle is None and len(site.node.args) >= 4:
                shuffle = site.node.args[3]
            if isinstance(shuffle, ast.Constant) and not shuffle.value:
                continue
            if _evaluation_only(script, site):
                continue  # the order of an evaluation pass does not matter
            yield Hit(site.line, site.node.col_offset,
                      "DistributedSampler shuffles with a seed that only changes through set_epoch(), which this "
                      "file never calls: every epoch sees the same order; call sampler.set_epoch(epoch) at the "
                      "start of each epoch")


def _epoch_loop(node) -> bool:
    """`for epoch in range(...)`, `for _ in range(epochs)`, `while epoch < n`: this file runs the epochs itself."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        text = ast.unparse(node.target) + " " + ast.unparse(node.iter)
    else:
        text = ast.unparse(node.test)
    return "epoch" in text.lower()


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
