"""MN3 (note): init_process_group without timeout= leaves a dead rank hidden behind the default watchdog; under the
HF Trainer, a dataset preprocessed inside main_process_first() with the default ddp_timeout (30 minutes) makes the
waiting ranks time out when the preprocessing runs longer."""
from __future__ import annotations

import ast
import re

from gpudoctor.engine.lint.model import Check, Hit

# the HF Trainer's argument classes and trl's configs built on them: each takes ddp_timeout (seconds), which the
# Trainer passes to init_process_group; the default, 1800, is what a long main_process_first step runs into
TRAINER_ARGS = re.compile(r"^(?:\w*TrainingArguments|SFTConfig|DPOConfig|GRPOConfig|ORPOConfig|KTOConfig|CPOConfig|"
                          r"RewardConfig|PPOConfig|RLOOConfig|OnlineDPOConfig)$")
PREPROCESS = ("map", "filter", "tokenize", "load_dataset", "from_generator")


def preprocesses_first(tree: ast.AST) -> ast.With | None:
    """A `with ....main_process_first(...):` block that maps, filters or loads a dataset: the main process works
    while the others wait at the block's barrier."""
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(isinstance(i.context_expr, ast.Call) and ast.unparse(
                i.context_expr.func).endswith("main_process_first") for i in node.items):
            if any(isinstance(c, ast.Call) and ast.unparse(c.func).rsplit(".", 1)[-1] in PREPROCESS
                   for stmt in node.body for c in ast.walk(stmt)):
                return node
    return None


class InitWithoutTimeout(Check):
    code = "MN3"
    slug = "init-without-timeout"
    severity = "note"
    summary = "init_process_group() without timeout=: a dead rank shows only after the 10-30 minute default"

    def find(self, script):
        yield from self._trainer(script)
        for site in script.calls:
            if site.attr != "init_process_group":
                continue
            if any(k.arg == "timeout" or k.arg is None for k in site.node.keywords) or len(site.node.args) >= 3:
                continue
            yield Hit(site.line, site.node.col_offset,
                      "init_process_group without timeout=: when one rank dies the others wait out the default "
                      "watchdog (10 min NCCL, 30 min gloo) before anything is reported; pass "
                      "timeout=datetime.timedelta(minutes=...) sized to your slowest collective")

    @staticmethod
    def _trainer(script):
        if "main_process_first" not in script.text:
            return
        block = preprocesses_first(script.tree)
        if block is None:
            return
        for site in script.calls:
            if site.attr and TRAINER_ARGS.match(site.attr) and not any(
                    k.arg in ("ddp_timeout", None) for k in site.node.keywords):
                yield Hit(site.line, site.node.col_offset,
                          f"{site.attr} without ddp_timeout while line {block.lineno} preprocesses the dataset in "
                          "main_process_first(): the other ranks wait at its barrier for the default 30 minutes "
                          "(ddp_timeout=1800) and a longer step kills them; set ddp_timeout, or preprocess before "
                          "the run")
