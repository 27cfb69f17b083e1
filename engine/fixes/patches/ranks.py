"""Rank-0 patches: D21 collectives out of the rank-0 branch, D23 side effects gated to rank 0 with an atomic save."""
from __future__ import annotations

import re

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import UNSAFE, NotApplicable
from gpudoctor.engine.lint.checks.d23_every_rank_saves import PER_RANK

_BARRIERS = {"barrier", "monitored_barrier", "wait_for_everyone"}


def _value_name(call: cst.Call, taken: set[str]) -> str:
    tail = h.last(h.call_name(call))
    base = re.sub(r"^(compute|get|calc|calculate|evaluate|eval|gather|reduce|all)_", "", tail) or tail
    for name in (base, f"{base}_value", f"{tail}_result"):
        if name.isidentifier() and name not in taken:
            return name
    i = 2
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"


def _outer_collectives(node, helpers) -> list[cst.Call]:
    """Collective calls not nested inside another collective call's arguments."""
    found = [c for c in h.calls(node) if h.is_collective_call(c, helpers)]
    return [c for c in found if not any(o is not c and any(x is c for x in h.calls(o)) for o in found)]


def _names(node) -> set[str]:
    return {n.value for n in h.m.findall(node, h.m.Name())}


def _assigned(node) -> set[str]:
    return {h.dotted(t.target) for t in h.m.findall(node, h.m.AssignTarget())} - {""}


def _flagged_lines(text: str, path: str) -> set[int]:
    """The lines lint's D21 check flags: a collective that some ranks skip. A barrier paired with one in the else
    branch, or the download-on-rank-0-first pair, is not flagged, and the planner leaves it alone."""
    from gpudoctor.engine.lint import lint_source

    return {f.line for f in lint_source(text, path, select=["D21"]).findings if f.entry_id == "D21"}


def collective_out_of_rank_branch(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    from libcst.metadata import MetadataWrapper, PositionProvider

    flagged = _flagged_lines(text, path)
    wrapper = MetadataWrapper(h.parse(text, path))
    positions = wrapper.resolve(PositionProvider)
    module = wrapper.module
    helpers = h.collective_helpers(module)
    taken = h.variable_names(module)
    moved: list[str] = []
    notes: list[str] = []

    def split(branch: list) -> tuple[list, list, list]:
        before, kept, after = [], [], []
        for s in branch:
            found = _outer_collectives(s, helpers)
            if not found:
                kept.append(s)
                continue
            # statements of the branch this one reads from must run on every rank too, and so must the ones they
            # read from in turn (acc = evaluate(); t = tensor([acc]); all_reduce(t): both lines go)
            needed, pulled = _names(s), []
            for k in reversed(kept):
                if _assigned(k) & needed:
                    pulled.append(k)
                    needed |= _names(k)
            for k in reversed(pulled):
                kept.remove(k)
                before.append(k)
                notes.append(f"also moved what the collective reads, which every rank now runs: "
                             f"{h.code(k).strip().splitlines()[0]}")
            moved.append(h.code(found[0]).split("(")[0])
            if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1:
                small = s.body[0]
                whole = (isinstance(small, cst.Expr) and small.value is found[0]) or \
                        (isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is found[0])
                if whole:
                    tail = h.last(h.call_name(found[0]))
                    (after if tail in _BARRIERS else before).append(s)
                    continue
                if isinstance(small, cst.Expr):
                    hoisted, swap = _hoist(found, taken)
                    before += hoisted
                    kept.append(h.replace_calls(s, swap))
                    continue
            if isinstance(s, cst.If) and all(_inside(call, s.test) for call in found):
                # `if evaluate(model) > best: torch.save(...)`: every rank computes the value, rank 0 alone acts on it
                hoisted, swap = _hoist(found, taken)
                before += hoisted
                kept.append(s.with_changes(test=h.replace_calls(s.test, swap)))
                continue
            notes.append(f"moved a whole statement out of the rank-0 branch ({h.code(s).strip().splitlines()[0]}); "
                         "check that what it writes or prints is still rank 0's alone")
            if _writes(s):
                notes.append(UNSAFE + "the statement moved to every rank also prints or writes")
            before.append(s)
        return before, kept, after

    paired: list = []  # rank-0 branches whose collective the other ranks meet elsewhere (lint leaves them alone)

    def flagged_in(original) -> bool:
        span = positions.get(original) if original is not None else None
        return span is not None and any(span.start.line <= n <= span.end.line for n in flagged)

    def rewrite(stmts, block):
        out = []
        originals = block.originals if len(block.originals) == len(stmts) else (None,) * len(stmts)
        for s, original in zip(stmts, originals):
            if isinstance(s, cst.If) and h.is_rank0_test(s.test) and _outer_collectives(s.body, helpers):
                if not flagged_in(original):
                    paired.append(s)
                    out.append(s)
                    continue
                s = h.indented(s)
                before, kept, after = split(list(s.body.body))
                rest = [p for p in h.and_parts(s.test) if not h.is_rank0_test(p)]
                if rest:  # `if rank == 0 and step % 50 == 0:` - the collective still runs every 50 steps
                    cond = " and ".join(f"({h.code(p)})" if isinstance(p, cst.BooleanOperation) else h.code(p)
                                        for p in rest)
                    before, after = _under(cond, before), _under(cond, after)
                if kept or s.orelse is not None:  # the branch's own comment stays with it
                    body = kept or [h.stmt("pass")]
                    out += [*before, s.with_changes(body=s.body.with_changes(body=body)), *after]
                else:
                    moved_out = before or after
                    moved_out[0] = moved_out[0].with_changes(leading_lines=[*s.leading_lines,
                                                                            *moved_out[0].leading_lines])
                    out += [*before, *after]
                continue
            if isinstance(s, cst.FunctionDef) and _rank_zero_decorator(s) and _outer_collectives(s.body, helpers) \
                    and flagged_in(original):
                out.append(_undecorate(s, split))
                continue
            out.append(s)
        if block.direct:
            out = _mirror_early_return(out, helpers, moved)
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not moved and paired:
        raise NotApplicable(f"{path}: the collectives in rank-0 branches here are met by the other ranks (a barrier "
                            "paired with one in the else branch or in a branch the others take), as lint reads them: "
                            "nothing to move")
    if not moved:
        other = next((i for i in h.m.findall(module, h.m.If()) if _non_main_test(i.test)
                      and _outer_collectives(i.body, helpers)), None)
        if other is not None:  # rank 0 skips it: the same hang, but a barrier there is often half of a pair
            call = h.code(_outer_collectives(other.body, helpers)[0]).split("(")[0]
            raise NotApplicable(f"{path}: {call} runs only under `if {h.code(other.test)}:`, which rank 0 skips; "
                                "move it out of that `if` by hand, unless rank 0 meets its own matching barrier "
                                "later (the download-on-rank-0-first pattern)")
        raise NotApplicable(f"{path}: no collective (or helper that issues one) inside a rank-0 branch")
    via = sorted(set(moved) & helpers)
    if via:
        notes.append(f"{', '.join(via)} issue(s) a collective, so every rank now calls them; only the print or "
                     "write stays on rank 0")
    return module.code, ["every rank now runs the collective; only the side effect stays on rank 0", *notes]


def _under(cond: str, stmts: list) -> list:
    return [cst.If(test=h.expr(cond), body=cst.IndentedBlock(body=stmts))] if stmts else []


def _rank_zero_decorator(func: cst.FunctionDef) -> str | None:
    for dec in func.decorators:
        name = h.dotted(dec.decorator)
        if h.last(name) == "rank_zero_only":
            return name
    return None


def _undecorate(func: cst.FunctionDef, split) -> cst.FunctionDef:
    """@rank_zero_only around a collective: run the function on every rank, gate only its side effects."""
    name = _rank_zero_decorator(func)
    before, kept, after = split(list(func.body.body))
    gate, run = [], []  # only the prints and writes stay on rank 0; state updates (metric.reset()) run everywhere
    for s in kept + [None]:
        if s is not None and _writes(s):
            run.append(s)
            continue
        if run:
            gate.append(cst.If(test=h.expr(f"{name}.rank == 0"), body=cst.IndentedBlock(body=run)))
            run = []
        if s is not None:
            gate.append(s)
    decorators = [d for d in func.decorators if h.dotted(d.decorator) != name]
    return func.with_changes(decorators=decorators,
                             body=func.body.with_changes(body=[*before, *gate, *after]))


def _hoist(found: list, taken: set[str]) -> tuple[list, object]:
    """(`name = <call>` for each collective call, to run on every rank; a swap putting each name in its call's place)."""
    hoisted, repl = [], {}
    for call in found:
        name = _value_name(call, taken)
        taken.add(name)
        hoisted.append(h.stmt(f"{name} = {h.code(call)}"))
        repl[h.code(call)] = name

    def swap(c):
        return cst.Name(repl[h.code(c)]) if h.code(c) in repl else None

    return hoisted, swap


def _inside(node, tree) -> bool:
    """Is this very node somewhere in tree?"""
    return any(n is node for n in h.m.findall(tree, h.m.Call()))


def _writes(s) -> bool:
    """A statement that prints, logs or writes something (a side effect one rank is enough for)."""
    return h.first_write(s) is not None


def _non_main_test(test) -> bool:
    """`rank != 0`, `dist.get_rank() > 0`, `not is_main`: the branch the other ranks take."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return h.is_rank0_test(test.expression)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(target.operator, (cst.NotEqual, cst.GreaterThan)) and h.code(target.comparator) == "0":
            equal = test.with_changes(comparisons=[target.with_changes(operator=cst.Equal())])
            return h.is_rank0_test(equal)
    return False


def _is_barrier(s) -> bool:
    return (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Expr)
            and isinstance(s.body[0].value, cst.Call) and h.last(h.call_name(s.body[0].value)) in _BARRIERS)


def _mirror_early_return(stmts: list, helpers, moved: list) -> list:
    """`if rank != 0: return` and later a barrier on rank 0's path: the other ranks meet it before returning."""
    for i, s in enumerate(stmts):
        if not (isinstance(s, cst.If) and s.orelse is None and _non_main_test(s.test)
                and isinstance(s.body, cst.IndentedBlock) and isinstance(s.body.body[-1], cst.SimpleStatementLine)
                and isinstance(s.body.body[-1].body[0], cst.Return)):
            continue
        barriers = [b for b in stmts[i + 1:] if _is_barrier(b)]
        if any(_is_barrier(b) for b in s.body.body):
            return stmts  # already mirrored
        if not barriers or any(_outer_collectives(b, helpers) for b in stmts[i + 1:] if not _is_barrier(b)):
            return stmts  # only a barrier can be mirrored; a collective with data needs the same data
        body = list(s.body.body)
        mirrored = [b.with_changes(leading_lines=(), trailing_whitespace=cst.TrailingWhitespace()) for b in barriers]
        moved.append("barrier")
        new = s.with_changes(body=s.body.with_changes(body=body[:-1] + mirrored + body[-1:]))
        return stmts[:i] + [new] + stmts[i + 1:]
    return stmts


# --- D23 -----------------------------------------------------------------------------------------


def _side_effect(s, flagged: set[str]) -> str | None:
    """'print' or 'save' for a statement line that only prints or saves, else None. Every rank's own output is left,
    as lint's D23 check leaves it: a save only where lint flags it (not to a per-rank path: rng_state_{rank}.pt), a
    print only when it does not name its rank (f"[rank {rank}] ...")."""
    if not isinstance(s, cst.SimpleStatementLine) or len(s.body) != 1 or not isinstance(s.body[0], cst.Expr):
        return None
    value = s.body[0].value
    if not isinstance(value, cst.Call):
        return None
    name = h.call_name(value)
    if name == "print":
        said = " ".join(h.code(a.value) for a in value.args)
        return None if any(word in said for word in PER_RANK) else "print"
    if name == "torch.save" and len(value.args) >= 2 and h.first_line(s) in flagged:
        return "save"
    return None


def _tmp_path(path: cst.BaseExpression) -> str | None:
    """The temp name next to `path` as code, or None when the path is an expression to name first."""
    if isinstance(path, cst.SimpleString) and not path.prefix and len(path.quote) == 1:
        return path.value[:-1] + ".tmp" + path.value[-1]
    if isinstance(path, cst.FormattedString) and len(path.end) == 1:
        text = h.code(path)
        return text[:-1] + ".tmp" + text[-1]
    if h.dotted(path):
        return f'f"{{{h.dotted(path)}}}.tmp"'
    return None


def _gate_group(group: list, dist: str, taken: set[str]) -> list:
    body = []
    saves = False
    for s in group:
        if isinstance(s.body[0].value, cst.Call) and h.call_name(s.body[0].value) == "torch.save":
            call = s.body[0].value
            obj, path = h.code(call.args[0].value), call.args[1].value
            tmp = _tmp_path(path)
            lead = s.leading_lines
            if tmp is None:  # os.path.join(...) and the like: name it once
                name = next(n for n in ("ckpt_path", "checkpoint_path", "save_path", "out_path") if n not in taken)
                body.append(h.stmt(f"{name} = {h.code(path)}").with_changes(leading_lines=lead))
                path, tmp, lead = cst.Name(name), f'f"{{{name}}}.tmp"', ()
            body += [h.stmt(f"torch.save({obj}, {tmp})").with_changes(leading_lines=lead),
                     h.stmt(f"os.replace({tmp}, {h.code(path)})")]
            saves = True
        else:
            body.append(s)
    lead = body[0].leading_lines
    body[0] = body[0].with_changes(leading_lines=())
    gate = cst.If(test=h.expr(f"{dist}.get_rank() == 0"), body=cst.IndentedBlock(body=body), leading_lines=lead)
    return [gate, h.stmt(f"{dist}.barrier()")] if saves else [gate]


def rank_zero_side_effects(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)
    if "init_process_group" not in text:
        raise NotApplicable(f"{path}: starts no process group, so every print and save runs once")
    dist = h.dist_alias(module)
    taken = {n.value for n in h.m.findall(module, h.m.Name())}
    counts = {"print": 0, "save": 0}
    flagged = h.flagged_lines(text, path, "D23")

    def gate(stmts, block):
        if block.gated:
            return stmts
        out, group = [], []
        for s in stmts + [None]:
            kind = _side_effect(s, flagged) if s is not None else None
            if kind:
                counts[kind] += 1
                group.append(s)
                continue
            if group:
                out += _gate_group(group, dist, taken)
                group = []
            if s is not None:
                out.append(s)
        return out

    gater = h.BodyRewriter(gate)

    def gate_all(stmts: list) -> list:
        return gate([s.visit(gater) for s in stmts], h.Block(None, False, False))

    # the scope that starts the group: only what runs after init_process_group, and the functions it then calls
    scopes = [None, *h.m.findall(module, h.m.FunctionDef())]
    init_scope, init_at = None, None
    for scope in scopes:
        body = module.body if scope is None else scope.body.body
        for i, s in enumerate(body):
            if not isinstance(s, (cst.FunctionDef, cst.ClassDef)) and any(
                    h.last(h.call_name(c)) == "init_process_group" for c in h.calls(s)):
                init_scope, init_at = scope, i
                break
        if init_at is not None:
            break
    if init_at is None:
        raise NotApplicable(f"{path}: init_process_group is not called at the top of a function or the module")
    init_body = module.body if init_scope is None else init_scope.body.body
    called = {h.call_name(c) for s in init_body[init_at + 1:] for c in h.calls(s)}
    init_name = init_scope.name.value if init_scope is not None else None

    class _Scopes(cst.CSTTransformer):
        def leave_FunctionDef(self, original, updated):
            if original.name.value == init_name:
                body = list(updated.body.body)
                return updated.with_changes(body=updated.body.with_changes(
                    body=body[: init_at + 1] + gate_all(body[init_at + 1:])))
            if original.name.value in called:
                return updated.with_changes(body=updated.body.with_changes(body=gate_all(list(updated.body.body))))
            return updated

    module = module.visit(_Scopes())
    if init_scope is None:
        body = list(module.body)
        module = module.with_changes(body=body[: init_at + 1] + gate_all(body[init_at + 1:]))
    if not any(counts.values()):
        raise NotApplicable(f"{path}: no print or torch.save that every rank runs after init_process_group (a save "
                            "to a per-rank path, or a print that names its rank, is that rank's own)")
    if counts["save"]:
        module = h.add_import(module, "import os", "os")
    notes = [f"{counts['print']} print(s) and {counts['save']} save(s) now run on rank 0 only"]
    if counts["save"]:
        notes.append("a save goes to a temp file renamed into place, and every rank waits at the barrier after it")
    return module.code, notes
