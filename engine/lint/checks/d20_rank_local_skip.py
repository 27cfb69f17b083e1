"""D20: a DDP loop skips a step on a condition each rank computes alone (a NaN or inf loss): the rank that skips
misses the step's all-reduce, the others wait in it, and the next collective pairs the wrong calls (a hang)."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

NONFINITE = ("isnan", "isinf", "isfinite", "isneginf", "isposinf")
LEAVES = (ast.Continue, ast.Break, ast.Return)
REDUCERS = ("all_reduce", "all_gather", "reduce", "broadcast", "all_gather_object", "gather_for_metrics", "reduce_op")


def _nonfinite_test(test: ast.AST) -> ast.Call | None:
    return next((n for n in ast.walk(test) if isinstance(n, ast.Call)
                 and ast.unparse(n.func).rsplit(".", 1)[-1] in NONFINITE), None)


def _leaves(body: list[ast.stmt]) -> bool:
    return any(isinstance(s, LEAVES) for s in body)


def _reduces(stmts: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func).rsplit(".", 1)[-1] in REDUCERS
               for s in stmts for n in ast.walk(s))


def rank_local_skips(loop: ast.For | ast.While | ast.FunctionDef):
    """(the if, its non-finite check) for each `if <isnan/isinf of something>: continue` (or `return`, in a function)
    in the body that comes before its backward() with no collective in between deciding it for all ranks."""
    body = loop.body
    backward = next((k for k, s in enumerate(body) if any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
        for n in ast.walk(s))), None)
    if backward is None:
        return
    for k in range(backward + 1):
        stmt = body[k]
        if isinstance(stmt, ast.If) and _leaves(stmt.body) and not stmt.orelse:
            check = _nonfinite_test(stmt.test)
            if check is not None and not _reduces(body[:k]):
                yield stmt, check


class RankLocalSkip(Check):
    code = "D20"
    slug = "rank-local-skip"
    severity = "error"
    summary = "a DDP loop skips a step on a NaN/inf check each rank makes alone: the ranks fall out of step and hang"

    def find(self, script):
        yield from _lightning_skips(script)
        if not script.uses("DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP", "fully_shard"):
            return
        # a loop's `continue`, or a train-step function's early `return`, before the backward
        for node in script.index.of(ast.For, ast.FunctionDef):
            for stmt, check in rank_local_skips(node):
                yield Hit(stmt.lineno, stmt.col_offset,
                          f"`if {ast.unparse(stmt.test)[:50]}:` skips the step on this rank alone; the others go on "
                          "into the step's all-reduce and wait for it, and every later collective pairs the wrong "
                          "calls; decide it for all ranks (all_reduce the flag with MAX) before skipping")


# Lightning under a multi-process strategy: training_step returning None skips the step on that rank alone
# (Lightning's own warning: "Skipping the `training_step` by returning None in distributed training is not supported")
_STRATEGIES = ("ddp", "fsdp", "deepspeed", "ddp_spawn", "ddp_find_unused_parameters_true", "ddp_notebook")


def _lightning_skips(script):
    if not script.mentions("LightningModule") or not any(f'"{s}' in script.text or f"'{s}" in script.text
                                                         for s in _STRATEGIES):
        return
    for cls in script.index.of(ast.ClassDef):
        if not any(ast.unparse(b).rsplit(".", 1)[-1] == "LightningModule" for b in cls.bases):
            continue
        for func in cls.body:
            if not isinstance(func, ast.FunctionDef) or func.name != "training_step":
                continue
            for stmt in ast.walk(func):
                if isinstance(stmt, ast.If) and _nonfinite_test(stmt.test) is not None and any(
                        isinstance(s, ast.Return) and (s.value is None or
                                                       (isinstance(s.value, ast.Constant) and s.value.value is None))
                        for s in stmt.body):
                    yield Hit(stmt.lineno, stmt.col_offset,
                              f"training_step returns None when `{ast.unparse(stmt.test)[:40]}`: under a multi-process "
                              "strategy this rank skips the step's gradient all-reduce and the others wait in it; "
                              "decide the skip for all ranks, or zero the loss instead of returning None")
