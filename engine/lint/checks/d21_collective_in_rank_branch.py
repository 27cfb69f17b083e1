"""D21: a collective (or a call that issues one) inside code only some ranks run."""
from __future__ import annotations

from gpudoctor.engine.lint.model import Check, Hit


class CollectiveInRankBranch(Check):
    code = "D21"
    slug = "collective-in-rank-branch"
    severity = "error"
    summary = "a collective, barrier or syncing save inside `if rank == 0:` (or after rank-only return) deadlocks"

    def find(self, script):
        candidates = []
        for site in script.calls:
            if site.gate is None:
                continue
            desc = script.collective(site)
            via = ""
            if desc is None:
                for target in script.targets(site):
                    hit = script.issues(target)
                    if hit:
                        desc, line, chain = hit
                        via = f"{site.attr}() -> {chain + ' -> ' if chain else ''}line {line}: "
                        break
            if desc is None or _point_to_point(site) or _subgroup_members(site):
                continue
            candidates.append((site, desc, via))
        for site, desc, via in candidates:
            if _complementary(site, candidates):
                continue
            gate = site.gate
            where = {"body": f"inside `if {gate.reason}:`", "else": f"in the else of `if {gate.reason[5:-1]}:`",
                     "after": gate.reason, "decorator": f"in a {gate.reason} function"}.get(gate.branch, gate.reason)
            yield Hit(site.line, site.node.col_offset,
                      f"{via}{desc} runs {where} (line {gate.node.lineno}); ranks outside the branch never join it "
                      "and every rank hangs; run it on all ranks and gate only the side effect")


def _point_to_point(site) -> bool:
    return site.attr in ("send", "recv", "isend", "irecv", "batch_isend_irecv")


def _subgroup_members(site) -> bool:
    """`if rank in ranks: all_reduce(t, group=g)`: the members of a subgroup run its collective, correctly."""
    import ast

    gate = site.gate
    if not any(k.arg == "group" for k in site.node.keywords) or gate.branch != "body":
        return False
    test = gate.node.test
    return isinstance(test, ast.Compare) and any(isinstance(op, (ast.In, ast.Lt, ast.LtE, ast.Gt, ast.GtE))
                                                 for op in test.ops)


def _complementary(site, candidates) -> bool:
    """`if local_rank not in [-1, 0]: barrier()` ... `if local_rank == 0: barrier()`: each rank joins once.
    So do `if rank != 0: barrier(); return` ... `barrier()` and a collective in both arms of one `if`."""
    gate = site.gate
    for other, _, _ in candidates:
        if other is site or other.func is not site.func or other.gate is None or other.attr != site.attr:
            continue
        og = other.gate
        # the same `if` with the collective on both of its paths: in its body and its else, or in a body that
        # returns early and after it (`if rank != 0: barrier(); return` ... `barrier()`)
        if og.node is gate.node and {og.branch, gate.branch} in ({"body", "else"}, {"body", "after"}):
            return True
        if og.node is not gate.node and og.branch in ("body", "else", "after") and \
                gate.branch in ("body", "else", "after") and _polarity(og) != _polarity(gate):
            return True
    return False


def _polarity(gate) -> bool:
    """True for the branch rank 0 takes as written (`== 0`, `in [-1, 0]`, `is_main`), False for its complement."""
    import ast

    test = gate.node.test
    negative = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    if isinstance(test, ast.Compare) and any(isinstance(op, (ast.NotEq, ast.NotIn, ast.Gt, ast.GtE, ast.IsNot))
                                             for op in test.ops):
        negative = True
    if gate.branch in ("else", "after"):
        negative = not negative
    return not negative
