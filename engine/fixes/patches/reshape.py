"""D26: model surgery done inside a rank-0 branch before DDP moved out of the branch, so every rank builds the same
model (and DDP's construction-time check of the shapes passes)."""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.checks.d26_model_changed_on_some_ranks import LAYERS, RESHAPERS


def _reshapes(stmt) -> bool:
    if any(h.last(h.call_name(c)) in RESHAPERS for c in h.calls(stmt)):
        return True
    for assign in h.m.findall(stmt, h.m.Assign()):
        if isinstance(assign.value, cst.Call) and LAYERS.match(h.last(h.call_name(assign.value)) or "") and any(
                isinstance(t.target, cst.Attribute) for t in assign.targets):
            return True
    return False


def reshape_on_every_rank(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """In `if rank == 0:` (or is_main_process ...) without an else, the statements up to the last one that adds or
    resizes layers (resize_token_embeddings, add_module, model.fc = nn.Linear(...)) move before the branch, so every
    rank runs them; what follows them (prints, saves) stays in the branch, and an emptied branch goes. Left alone: a
    branch with an else, or one whose statements before the surgery write output or files (only rank 0 should)."""
    h.require_ddp(text, path)
    module = h.parse(text, path)
    moved: list[str] = []
    refused: list[str] = []

    def rewrite(stmts, block):
        out = []
        for original in stmts:
            if not (isinstance(original, cst.If) and h.is_rank0_test(original.test)):
                out.append(original)
                continue
            # `if rank == 0: model.add_module(...); print(...)`: an indented block, one statement per line, so the
            # surgery can move without the print that shares its line
            s = h.indented(original)
            body = list(s.body.body)
            marks = [k for k, stmt in enumerate(body) if _reshapes(stmt)]
            if not marks:
                out.append(original)
                continue
            test = h.code(s.test)
            if s.orelse is not None:
                refused.append(f"`if {test}:` has an else branch")
                out.append(original)
                continue
            prefix = body[:marks[-1] + 1]
            # output, files and trackers are rank 0's: a branch that writes before its surgery is not moved
            work = next((w for w in map(h.first_write, prefix) if w), None)
            if work is not None:
                refused.append(f"`if {test}:` calls {work}() before its surgery, which only rank 0 should do")
                out.append(original)
                continue
            moved.extend(h.code(stmt.with_changes(leading_lines=())).strip() for stmt in prefix)
            prefix[0] = prefix[0].with_changes(leading_lines=(*s.leading_lines, *prefix[0].leading_lines))
            out.extend(prefix)
            rest = body[marks[-1] + 1:]
            if rest:
                out.append(s.with_changes(leading_lines=(), body=s.body.with_changes(body=rest)))
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not moved:
        why = f" ({refused[0]})" if refused else ""
        raise NotApplicable(f"{path}: no layers added or resized inside a rank-0 branch{why}")
    return module.code, [f"every rank now runs `{moved[-1][:60]}` (and what it depends on in that branch), so all "
                         "of them build the same model before DDP compares the shapes"]


class _WrapName(cst.CSTTransformer):
    """The first DDP call whose first argument reads `built` (the statement that wraps the model), given `name`."""

    def __init__(self, built: str, name: str):
        super().__init__()
        self.built, self.name = built, name
        self.done = False

    def leave_Call(self, original, updated):
        if self.done or h.last(h.call_name(updated)) not in ("DDP", "DistributedDataParallel") or not updated.args:
            return updated
        if h.code(updated.args[0].value).strip() != self.built:
            return updated
        self.done = True
        return updated.with_changes(args=[updated.args[0].with_changes(value=cst.Name(self.name)), *updated.args[1:]])


def lazy_shapes_before_ddp(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """A model with lazy layers (nn.LazyLinear ...) gets one forward pass on `--param sample_input=EXPR` under
    torch.no_grad() just before the statement that wraps it in DDP, which gives every lazy parameter its shape; DDP
    refuses uninitialized parameters. The input is the user's: gpudoctor cannot know the model's input shape."""
    import ast

    from gpudoctor.engine.lint.checks.d26_model_changed_on_some_ranks import LAZY, WRAPPERS, _forward_before_wrap
    from gpudoctor.engine.lint.script import Script

    h.require_ddp(text, path)
    try:
        script = Script(text, path)
    except SyntaxError as exc:
        raise NotApplicable(f"{path}: not valid Python (line {exc.lineno})") from None
    lazy = next((s for s in script.calls if s.attr and LAZY.match(s.attr)), None)
    wrap = next((s for s in script.calls if s.attr in WRAPPERS and s.node.args), None)
    if lazy is None or wrap is None:
        raise NotApplicable(f"{path}: no lazy layer (nn.Lazy...) in a model that DDP wraps")
    if _forward_before_wrap(script, lazy, wrap):
        raise NotApplicable(f"{path}: the model already runs a forward pass before DDP wraps it (line {wrap.line})")
    sample = facts.get("sample_input")
    if not sample:
        raise NotApplicable(f"{path}: {lazy.attr} (line {lazy.line}) needs one forward pass before DDP; give an input "
                            "batch on the model's device, e.g. --param sample_input='torch.zeros(1, 32, device=device)'")
    model = ast.unparse(wrap.node.args[0])
    # DDP(Net()) builds the model inside the call: a forward on another Net() would leave the wrapped one lazy, so the
    # construction is bound to a name first and both the forward and the wrap use it
    built = model if isinstance(wrap.node.args[0], ast.Call) else None
    if built is not None:
        taken = {n.id for n in ast.walk(script.tree) if isinstance(n, ast.Name)}
        model = next(name for name in ("net", "lazy_model", *(f"lazy_model_{i}" for i in range(len(taken) + 1)))
                     if name not in taken)
    from libcst.metadata import MetadataWrapper, PositionProvider

    wrapper = MetadataWrapper(h.parse(text, path))
    positions = wrapper.resolve(PositionProvider)
    done: list[int] = []
    compound = (cst.If, cst.For, cst.While, cst.With, cst.Try, cst.FunctionDef, cst.ClassDef)

    def wraps(small) -> bool:
        return any(h.last(h.call_name(c)) in WRAPPERS for c in h.calls(small))

    def warmed(originals, updated) -> list:
        out = []
        for old, s in zip(originals, updated):
            span = positions[old]
            if (not done and span.start.line <= wrap.line <= span.end.line and isinstance(old, cst.SimpleStatementLine)
                    and len(old.body) > 1 and any(map(wraps, old.body))):
                # `model = Net(); model = DDP(model)`: one statement per line, and the forward goes just before the
                # wrap, after the statements that build the model
                parts = h.one_per_line([s])
                k = next(i for i, small in enumerate(old.body) if wraps(small))
                out += parts[:k]
                old, s = parts[k], parts[k]
                if k:
                    s = s.with_changes(leading_lines=())
                tail = parts[k + 1:]
            else:
                tail = []
            if not done and span.start.line <= wrap.line <= span.end.line and not isinstance(old, compound):
                first = [h.stmt(f"{model} = {built}")] if built is not None else []
                warm = h.stmt(f"with torch.no_grad():\n    {model}({sample})\n")
                head = (first or [warm])[0]
                head = head.with_changes(leading_lines=(*s.leading_lines, h.comment_line(
                    "# lazy layers take their shapes from one forward pass; DDP refuses them before (D26)")))
                rest = s.with_changes(leading_lines=())
                if built is not None:
                    renamer = _WrapName(built, model)
                    rest = rest.visit(renamer)
                    if not renamer.done:
                        out.append(s)
                        continue
                    out += [head, warm, rest]
                else:
                    out += [head, rest]
                out += tail
                done.append(span.start.line)
                continue
            out.append(s)
            out += tail
        return out

    class _Warm(cst.CSTTransformer):
        def leave_IndentedBlock(self, original, updated):
            return updated.with_changes(body=warmed(original.body, updated.body))

        def leave_Module(self, original, updated):
            return updated.with_changes(body=warmed(original.body, updated.body))

    module = wrapper.module.visit(_Warm())
    if not done:
        raise NotApplicable(f"{path}: the DDP wrap on line {wrap.line} is not a statement of its own")
    module = h.add_import(module, "import torch", "torch")
    return module.code, [f"{model}({sample}) runs once under torch.no_grad() before DDP (line {done[0]}): the input "
                         "must have the shape and device of a real batch"]
