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
        for site in script.calls:
            if script.effective_gate(site) is not None:
                continue
            if site.name == "torch.save":
                args = " ".join(ast.unparse(a) for a in (*site.node.args, *(k.value for k in site.node.keywords)))
                if any(w in args for w in PER_RANK):
                    continue
                yield Hit(site.line, site.node.col_offset,
                          "torch.save runs on every rank: N processes write the same file at once and can leave it "
                          "truncated; save on rank 0 only, then barrier on every rank")
            elif site.name == "print" and site.loop and site.node.args and site.func is not None:
                text = " ".join(ast.unparse(a) for a in site.node.args)
                if any(w in text for w in PER_RANK):
                    continue
                yield Hit(site.line, site.node.col_offset,
                          "print in a loop runs on every rank: each line appears once per process; "
                          "print on rank 0 only", "note")
