"""D23: torch.save on every rank (one file written N times at once) and prints from every rank in a loop."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

PER_RANK = ("rank", "RANK", "shard", "process_index")


class EveryRankSaves(Check):
    code = "D23"
    slug = "every-rank-saves-or-prints"
    severity = "warning"
    summary = "torch.save or print reached by every rank: N writers on one file, N copies of each log line"

    def find(self, script):
        if not script.multiprocess or script.mentions("xmp.spawn", "xm.save"):
            return
        # DETR/DeiT/MAE's setup_for_distributed(is_master) replaces builtins.print with one that prints on the
        # master only; a script that calls it (or sets builtins.print itself) has rank-0 prints already
        quiet_print = script.mentions("setup_for_distributed", "builtins.print =", "builtin.print =", "__builtin__.print")
        for site in script.calls:
            if script.effective_gate(site) is not None:
                continue
            if site.name == "torch.save":
                target = site.node.args[1:2] or [k.value for k in site.node.keywords if k.arg == "f"]
                args = _expanded(script, target)
                if any(w in args for w in PER_RANK):
                    continue
                yield Hit(site.line, site.node.col_offset,
                          "torch.save runs on every rank: N processes write the same file at once and can leave it "
                          "truncated; save on rank 0 only, then barrier on every rank")
            elif site.name == "print" and site.loop and site.node.args and site.func is not None and not quiet_print:
                text = " ".join(ast.unparse(a) for a in site.node.args)
                if any(w in text for w in PER_RANK):
                    continue
                yield Hit(site.line, site.node.col_offset,
                          "print in a loop runs on every rank: each line appears once per process; "
                          "print on rank 0 only", "note")


def _expanded(script, nodes) -> str:
    """The save call's arguments with the names in them replaced by what was assigned to them (2 levels)."""
    text = " ".join(ast.unparse(n) for n in nodes)
    names = {n.id for root in nodes for n in ast.walk(root) if isinstance(n, ast.Name)}
    for _ in range(2):
        more = set()
        for targets, value in script.assigns:
            if names & set(targets):
                text += " " + ast.unparse(value)
                more |= {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        names = more
    return text
