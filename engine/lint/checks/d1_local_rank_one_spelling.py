"""D1: argparse takes the local rank under one spelling only, and some launcher passes the other.

`python -m torch.distributed.launch` passes the local rank as an argument: `--local_rank=N` before torch 2.0,
`--local-rank=N` from 2.0 on; the deepspeed launcher passes `--local_rank=N`. A parser that knows one spelling
stops every worker at start-up with "error: unrecognized arguments: --local-rank=0" (or the underscore form).
torchrun passes neither and sets LOCAL_RANK in the environment instead.
"""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

SPELLINGS = ("--local_rank", "--local-rank")
WHO = {"--local_rank": "torch.distributed.launch in torch 2.x passes --local-rank=N",
       "--local-rank": "torch.distributed.launch before torch 2.0 and the deepspeed launcher pass --local_rank=N"}


def spelling(call: ast.Call) -> str | None:
    """The one local-rank spelling an add_argument call names, when it names exactly one."""
    names = {a.value for a in call.args if isinstance(a, ast.Constant) and a.value in SPELLINGS}
    return names.pop() if len(names) == 1 else None


class LocalRankOneSpelling(Check):
    code = "D1"
    slug = "local-rank-one-spelling"
    severity = "warning"
    summary = "argparse knows --local_rank or --local-rank, not both: a launcher that passes the other stops every rank"

    def find(self, script):
        for site in script.calls:
            if site.attr != "add_argument":
                continue
            one = spelling(site.node)
            if one is None:
                continue
            other = SPELLINGS[1 - SPELLINGS.index(one)]
            # the deepspeed launcher passes --local_rank: a DeepSpeed script that takes it works there
            quiet = one == "--local_rank" and script.imports_any("deepspeed")
            yield Hit(site.line, site.node.col_offset,
                      f"the parser takes {one} only; {WHO[one]} and argparse stops with 'unrecognized arguments': "
                      f"accept both (add \"{other}\"), or read os.environ['LOCAL_RANK'] under torchrun",
                      "note" if quiet else None)
