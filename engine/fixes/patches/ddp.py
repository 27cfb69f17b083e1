"""DDP construction patches: D8 find_unused_parameters, D10 SyncBatchNorm, MN3 init and Trainer timeouts, P1
DataParallel -> DDP, P2 the move to the device before the wrap."""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.checks.mn3_init_without_timeout import TRAINER_ARGS

D8_WARNING = ("# gpudoctor D8: find_unused_parameters=True can hide a real bug (an output",
              "# that never reaches the loss) and walks the autograd graph every step")


def _is_ddp(call: cst.Call) -> bool:
    return h.last(h.call_name(call)) in ("DDP", "DistributedDataParallel")


def find_unused_parameters(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)

    def wants(call):
        arg = h.kwarg(call, "find_unused_parameters")
        return _is_ddp(call) and (arg is None or h.code(arg.value) == "False")

    def fix(call):
        if not wants(call):
            return None
        if h.kwarg(call, "find_unused_parameters") is not None:
            return call.with_changes(args=[a.with_changes(value=cst.Name("True"))
                                           if a.keyword is not None and a.keyword.value == "find_unused_parameters"
                                           else a for a in call.args])
        return h.add_kwarg(call, "find_unused_parameters", cst.Name("True"))

    changed = []

    def rewrite(stmts, block):
        out = []
        for s in stmts:
            if isinstance(s, cst.SimpleStatementLine) and any(wants(c) for c in h.calls(s)):
                s = h.replace_calls(s, fix)
                s = s.with_changes(leading_lines=[*s.leading_lines, *map(h.comment_line, D8_WARNING)])
                changed.append(s)
            out.append(s)
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not changed:
        raise NotApplicable(f"{path}: no DistributedDataParallel(...) without find_unused_parameters=True")
    return module.code, ["first look for an output that never reaches the loss: this flag hides it and costs a "
                         "graph walk every step; TORCH_DISTRIBUTED_DEBUG=INFO names the unused parameters"]


def _wrapped_name(call: cst.Call) -> str | None:
    """`model` in DDP(model, ...) or DDP(model.to(device), ...)."""
    if not call.args:
        return None
    value = call.args[0].value
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("to", "cuda"):
        value = value.func.value
    return h.dotted(value) or None


def sync_batchnorm(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)
    if "convert_sync_batchnorm" in text:
        raise NotApplicable(f"{path}: already converts BatchNorm to SyncBatchNorm")
    nn = h.nn_alias(module)
    done = []

    def inline(call):  # DDP(Net().cuda(gpu), ...): convert the model where it is built
        if done or not _is_ddp(call) or not call.args:
            return None
        value = call.args[0].value
        chain = []
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("to", "cuda"):
            chain.append(value)
            value = value.func.value
        converted = h.expr(f"{nn}.SyncBatchNorm.convert_sync_batchnorm({h.code(value)})")
        for link in reversed(chain):
            converted = link.with_changes(func=link.func.with_changes(value=converted))
        done.append("inline")
        return call.with_changes(args=[call.args[0].with_changes(value=converted), *call.args[1:]])

    def rewrite(stmts, block):
        out = []
        for s in stmts:
            if not done and isinstance(s, cst.SimpleStatementLine):
                ddp = [c for c in h.calls(s) if _is_ddp(c)]
                name = _wrapped_name(ddp[0]) if ddp else None
                if name:
                    convert = h.stmt(f"{name} = {nn}.SyncBatchNorm.convert_sync_batchnorm({name})")
                    out.append(convert.with_changes(leading_lines=s.leading_lines))
                    s = s.with_changes(leading_lines=())
                    done.append(name)
                elif ddp:
                    s = h.replace_calls(s, inline)
            out.append(s)
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not done:
        raise NotApplicable(f"{path}: no DistributedDataParallel(model, ...) call to convert before")
    if nn == "torch.nn":
        module = h.add_import(module, "import torch", "torch")
    notes = ["SyncBatchNorm needs GPU modules and an initialised process group: convert only on the distributed path",
             "every rank must now run the same forward passes (an eval on rank 0 alone would hang, D21)"]
    if "BatchNorm" not in text:
        notes.append("no BatchNorm layer is named in this file: check that the model has some")
    return module.code, notes


def _timedelta_name(module: cst.Module) -> str:
    """How this file can spell timedelta: `timedelta` when imported from datetime (or to be), `dt.timedelta` after
    `import datetime as dt`. `from datetime import datetime` binds the class, which has no timedelta."""
    for imp in h.m.findall(module, h.m.ImportFrom()):
        if h.dotted(imp.module or cst.Name("_")) == "datetime" and not isinstance(imp.names, cst.ImportStar) and any(
                a.name.value == "timedelta" and a.asname is None for a in imp.names):
            return "timedelta"
    for imp in h.m.findall(module, h.m.Import()):
        for alias in imp.names:
            if h.dotted(alias.name) == "datetime":
                return f"{alias.asname.name.value if alias.asname else 'datetime'}.timedelta"
    return "timedelta"


def init_timeout(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)
    minutes = int(facts.get("timeout_minutes") or 10)
    timedelta = _timedelta_name(module)
    changed = []

    def fix(call):
        if h.last(h.call_name(call)) != "init_process_group" or h.kwarg(call, "timeout") is not None:
            return None
        changed.append(call)
        return h.add_kwarg(call, "timeout", h.expr(f"{timedelta}(minutes={minutes})"))

    module = h.replace_calls(module, fix)
    if not changed:
        raise NotApplicable(f"{path}: no init_process_group(...) call without timeout=")
    if timedelta == "timedelta":
        module = h.add_import(module, "from datetime import timedelta", "timedelta")
    return module.code, [f"a collective now fails after {minutes} minutes whatever the release and backend (NCCL's "
                         "default is 10 minutes since torch 2.2, 30 before it and for gloo); give --param "
                         "timeout_minutes=N for collectives that legitimately take longer; keep "
                         "TORCH_NCCL_ASYNC_ERROR_HANDLING=1"]


def trainer_ddp_timeout(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """MN3 under the HF Trainer: ddp_timeout on its arguments, raised to the given minutes (a literal below them is
    raised; a larger one, or one the script computes, is left alone)."""
    module = h.parse(text, path)
    seconds = int(facts.get("timeout_minutes") or 120) * 60
    changed, kept = [], []

    def fix(call):
        if not TRAINER_ARGS.match(h.last(h.call_name(call))):
            return None
        arg = h.kwarg(call, "ddp_timeout")
        if arg is None:
            changed.append(call)
            return h.add_kwarg(call, "ddp_timeout", cst.Integer(str(seconds)))
        if isinstance(arg.value, cst.Integer) and int(arg.value.value) < seconds:
            changed.append(call)
            return call.with_changes(args=[a.with_changes(value=cst.Integer(str(seconds))) if a is arg else a
                                           for a in call.args])
        kept.append(h.code(arg.value))
        return None

    module = h.replace_calls(module, fix)
    if not changed:
        why = f"already sets ddp_timeout={kept[0]}" if kept else "no TrainingArguments(...) or trl config call"
        raise NotApplicable(f"{path}: {why} (arguments parsed from the command line take --ddp_timeout {seconds})")
    return module.code, [f"ranks now wait {seconds // 60} minutes in a collective before giving up (give --param "
                         "timeout_minutes=N to choose); better still, preprocess the dataset before the run"]


def dataparallel_to_ddp(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)
    dist = h.dist_alias(module)
    inited = "init_process_group" in text
    done = []

    def fix(call):
        func = call.func
        if done and isinstance(func, cst.Attribute) and func.attr.value in ("cuda", "to") \
                and isinstance(func.value, cst.Call) and h.call_name(func.value) == "DDP":
            return func.value  # DDP(...) already moved the model: drop the .cuda() DataParallel needed
        if h.last(h.call_name(call)) != "DataParallel" or not call.args:
            return None
        done.append(call)
        inner = h.code(call.args[0].value)
        return h.expr(f"DDP({inner}.to(local_rank), device_ids=[local_rank])")

    def rewrite(stmts, block):
        out = []
        for s in stmts:
            if isinstance(s, cst.SimpleStatementLine) and any(h.last(h.call_name(c)) == "DataParallel" for c in h.calls(s)):
                s = h.replace_calls(s, fix)
                setup = [] if inited else [h.stmt(f'{dist}.init_process_group(backend="nccl")')]
                setup += [h.stmt('local_rank = int(os.environ["LOCAL_RANK"])'),
                          h.stmt("torch.cuda.set_device(local_rank)")]
                setup[0] = setup[0].with_changes(leading_lines=s.leading_lines)
                s = s.with_changes(leading_lines=())
                out += setup
            out.append(s)
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not done:
        raise NotApplicable(f"{path}: no nn.DataParallel(...) to replace")
    module = h.add_import(module, "import os", "os")
    module = h.add_import(module, "import torch", "torch")
    if dist == "torch.distributed":
        module = h.add_import(module, "import torch.distributed as dist", "dist")
        module = module.visit(_Rename("torch.distributed.init_process_group", "dist.init_process_group"))
    module = h.add_import(module, "from torch.nn.parallel import DistributedDataParallel as DDP", "DDP")
    return module.code, [
        "launch with torchrun (one process per GPU) instead of python",
        "batch_size is now per process, not global: divide it by the number of GPUs or recheck the learning rate (D11)",
        "give each rank its own shard with a DistributedSampler (P3), drop the loss .mean() DataParallel needed, "
        "and save model.module.state_dict() from rank 0 only",
    ]


class _Rename(cst.CSTTransformer):
    def __init__(self, old: str, new: str):
        super().__init__()
        self.old, self.new = old, new

    def leave_Attribute(self, original, updated):
        return h.expr(self.new) if h.dotted(updated) == self.old else updated


# torch.utils.checkpoint's functions that take use_reentrant (torch 1.11 on); the default stays reentrant
_CHECKPOINT_FUNCS = ("checkpoint", "checkpoint_sequential")


def _checkpoint_names(module: cst.Module) -> set[str]:
    """How this file spells torch's checkpoint functions: checkpoint, cp.checkpoint, torch.utils.checkpoint.checkpoint."""
    import libcst.matchers as m

    names = {f"torch.utils.checkpoint.{f}" for f in _CHECKPOINT_FUNCS}
    for imp in m.findall(module, m.ImportFrom()):
        if imp.module is not None and h.dotted(imp.module) == "torch.utils.checkpoint" and not isinstance(
                imp.names, cst.ImportStar):
            names |= {(a.asname.name.value if a.asname else a.name.value) for a in imp.names
                      if a.name.value in _CHECKPOINT_FUNCS}
    for imp in m.findall(module, m.Import()):
        for a in imp.names:
            if h.dotted(a.name) == "torch.utils.checkpoint" and a.asname:
                names |= {f"{a.asname.name.value}.{f}" for f in _CHECKPOINT_FUNCS}
    return names


def _with_value(call: cst.Call, arg: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    """The call with one of its arguments given another value."""
    return call.with_changes(args=[a.with_changes(value=value) if a is arg else a for a in call.args])


def _non_reentrant_kwargs(call: cst.Call) -> cst.Call | None:
    """gradient_checkpointing_enable(...) with use_reentrant False in its gradient_checkpointing_kwargs dict (added
    when the dict or the key is missing); None when it already is, or when the kwargs are not a literal dict."""
    arg = h.kwarg(call, "gradient_checkpointing_kwargs")
    if arg is None:
        return h.add_kwarg(call, "gradient_checkpointing_kwargs", h.expr('{"use_reentrant": False}'))
    if not isinstance(arg.value, cst.Dict):
        return None
    elements = list(arg.value.elements)
    for i, e in enumerate(elements):
        keyed = isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)
        if keyed and e.key.evaluated_value == "use_reentrant":
            if h.code(e.value) == "False":
                return None
            elements[i] = e.with_changes(value=cst.Name("False"))
            return _with_value(call, arg, arg.value.with_changes(elements=elements))
    pairs = [h.code(e) for e in elements] + ['"use_reentrant": False']
    return _with_value(call, arg, h.expr("{" + ", ".join(pairs) + "}"))


def non_reentrant_checkpoint(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """D8: activation checkpointing in its non-reentrant form (use_reentrant=False for torch's checkpoint,
    gradient_checkpointing_kwargs for transformers' gradient_checkpointing_enable), which DDP's hooks see once."""
    module = h.parse(text, path)
    spelled = _checkpoint_names(module)
    changed = []

    def fix(call):
        name = h.call_name(call)
        new = None
        if name in spelled:
            arg = h.kwarg(call, "use_reentrant")
            if arg is None:
                new = h.add_kwarg(call, "use_reentrant", cst.Name("False"))
            elif h.code(arg.value) != "False":
                new = _with_value(call, arg, cst.Name("False"))
        elif h.last(name) == "gradient_checkpointing_enable":
            new = _non_reentrant_kwargs(call)
        if new is not None:
            changed.append(name)
        return new

    module = h.replace_calls(module, fix)
    if not changed:
        raise NotApplicable(f"{path}: no reentrant torch.utils.checkpoint call or gradient_checkpointing_enable()")
    return module.code, ["non-reentrant checkpointing runs each parameter's gradient hook once per step, so DDP "
                         "(with or without find_unused_parameters) marks it ready once; it needs torch 1.11+ "
                         "(transformers 4.35+ for gradient_checkpointing_kwargs)"]


_MOVES = ("to", "cuda")


def _move_of(node, names: set[str]) -> cst.Call | None:
    """`x.to(...)` / `x.cuda(...)` on one of names, as a call node; None for anything else."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _MOVES \
            and isinstance(node.func.value, cst.Name) and node.func.value.value in names:
        return node
    return None


def _moving_statement(s, names: set[str]) -> cst.Call | None:
    """The move a statement consists of: `model.to(d)`, `model.cuda()`, `model = model.to(d)` (same name)."""
    if not isinstance(s, cst.SimpleStatementLine) or len(s.body) != 1:
        return None
    small = s.body[0]
    if isinstance(small, cst.Expr):
        return _move_of(small.value, names)
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        move = _move_of(small.value, names)
        return move if move is not None and small.targets[0].target.value == move.func.value.value else None
    return None


def move_before_ddp(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """P2: the model moved to its device before DistributedDataParallel wraps it. `DDP(model, ...)` followed in the
    same block by `model.to(d)` / `model.cuda()` (or the wrapped name moved) becomes `DDP(model.to(d), ...)` and the
    later move goes; `DDP(model, ...).to(d)` becomes `DDP(model.to(d), ...)`."""
    module = h.parse(text, path)
    done: list[str] = []

    def inward(call):  # DDP(model, ...).to(d) -> DDP(model.to(d), ...)
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in _MOVES and \
                isinstance(call.func.value, cst.Call) and _is_ddp(call.func.value) and call.func.value.args and \
                isinstance(call.func.value.args[0].value, cst.Name):
            ddp = call.func.value
            moved = call.with_changes(func=call.func.with_changes(value=ddp.args[0].value))
            done.append(h.code(moved))
            return ddp.with_changes(args=[ddp.args[0].with_changes(value=moved), *ddp.args[1:]])
        return None

    def rewrite(stmts, block):
        out = list(stmts)
        for i, s in enumerate(out):
            if not isinstance(s, cst.SimpleStatementLine):
                continue
            ddps = [c for c in h.calls(s) if _is_ddp(c) and c.args and isinstance(c.args[0].value, cst.Name)]
            if len(ddps) != 1:
                continue
            model = ddps[0].args[0].value.value
            small = s.body[0]
            wrapped = small.targets[0].target.value if isinstance(small, cst.Assign) and \
                isinstance(small.targets[0].target, cst.Name) else None
            later = next(((j, m) for j in range(i + 1, len(out))
                          if (m := _moving_statement(out[j], {model, wrapped} - {None})) is not None), None)
            if later is None:
                continue
            j, move = later
            moved = move.with_changes(func=move.func.with_changes(value=cst.Name(model)))
            done.append(h.code(moved))
            def wrap_moved(c, model=model, moved=moved):
                if _is_ddp(c) and c.args and isinstance(c.args[0].value, cst.Name) and c.args[0].value.value == model:
                    return c.with_changes(args=[c.args[0].with_changes(value=moved), *c.args[1:]])
                return None

            out[i] = h.replace_calls(s, wrap_moved)
            gone = out.pop(j)
            if j < len(out) and gone.leading_lines:
                out[j] = out[j].with_changes(leading_lines=[*gone.leading_lines, *out[j].leading_lines])
            break
        return out

    module = h.replace_calls(module, inward)
    module = h.rewrite_bodies(module, rewrite)
    if not done:
        raise NotApplicable(f"{path}: no DistributedDataParallel(model) whose model is moved to its device after")
    return module.code, [f"the model now reaches its device before DDP wraps it ({', '.join(done)}): DDP builds its "
                         "buckets and broadcasts from where the parameters are when it is constructed"]
