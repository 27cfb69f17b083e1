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


def rank_local_skips(loop: ast.For | ast.While):
    """(the if, its non-finite check) for each `if <isnan/isinf of something>: continue` in the loop body that comes
    before the loop's backward() with no collective in between deciding it for all ranks."""
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
        if not script.uses("DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP", "fully_shard"):
            return
        for loop in script.index.of(ast.For):
            for stmt, check in rank_local_skips(loop):
                yield Hit(stmt.lineno, stmt.col_offset,
                          f"`if {ast.unparse(stmt.test)[:50]}:` skips the step on this rank alone; the others go on "
                          "into the step's all-reduce and wait for it, and every later collective pairs the wrong "
                          "calls; decide it for all ranks (all_reduce the flag with MAX) before skipping")
