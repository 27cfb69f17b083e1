"""Training-loop patches: D9 the loop inside Join, D22 sampler.set_epoch, MN5 resume from the latest checkpoint, MN7
a complete checkpoint on every node."""
from __future__ import annotations

import json

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable


def _has_backward(node) -> bool:
    return any(h.last(h.call_name(c)) == "backward" for c in h.calls(node))


def join_uneven_inputs(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)
    if "Join(" in text or "join_uneven_inputs" in text:
        raise NotApplicable(f"{path}: the loop already runs under Join")
    model = next(iter(h.ddp_names(module)), None)
    if model is None:
        raise NotApplicable(f"{path}: no `model = DDP(...)` to join")
    done = []

    def rewrite(stmts, block):
        out = []
        for s in stmts:
            inner = [f for f in h.m.findall(s.body, h.m.For()) if _has_backward(f)] if isinstance(s, cst.For) else []
            if isinstance(s, cst.For) and not inner and _has_backward(s.body) and not done:
                done.append(s)
                wrapped = cst.With(items=[cst.WithItem(item=h.expr(f"Join([{model}])"))],
                                   body=cst.IndentedBlock(body=[s.with_changes(leading_lines=())]),
                                   leading_lines=s.leading_lines)
                out.append(wrapped)
                continue
            out.append(s)
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not done:
        raise NotApplicable(f"{path}: no training loop (a for loop that calls backward) found")
    module = h.add_import(module, "from torch.distributed.algorithms.join import Join", "Join")
    return module.code, ["a rank that runs out of batches now shadows the others' collectives until all are done; "
                         "with equal shards (DistributedSampler, same drop_last) it is not needed"]


class _SamplerScopes(cst.CSTVisitor):
    """Variable -> the innermost function that assigns it (None at module level), for each DistributedSampler."""

    def __init__(self):
        super().__init__()
        self.functions: list = []
        self.found: dict[str, object] = {}

    def visit_FunctionDef(self, node) -> bool:
        self.functions.append(node)
        return True

    def leave_FunctionDef(self, original) -> None:
        self.functions.pop()

    def visit_Assign(self, node) -> bool:
        if isinstance(node.value, cst.Call) and h.last(h.call_name(node.value)) == "DistributedSampler":
            name = h.dotted(node.targets[0].target)
            if name and name not in self.found:
                self.found[name] = self.functions[-1] if self.functions else None
        return True


def _sampler_names(module: cst.Module) -> dict[str, object]:
    """Variable -> the function that assigns it (None at module level), for each DistributedSampler."""
    visitor = _SamplerScopes()
    module.visit(visitor)
    return visitor.found


def _visible(name: str, scope, block) -> bool:
    """A sampler's name can be read in this block: assigned in its function or at module level, or an attribute
    (self.sampler), which outlives the method that set it."""
    return scope is None or scope is block.scope or "." in name


def _epoch_loop(s) -> bool:
    return (isinstance(s, cst.For) and isinstance(s.iter, cst.Call) and h.call_name(s.iter) == "range"
            and bool(h.m.findall(s.body, h.m.For())))


_COUNTERS = ("range", "trange", "count")  # as lint's D22 check reads an epoch loop
_WRAPPERS = ("tqdm", "enumerate")


def _pass_loop(s) -> bool:
    """An epoch loop as lint's D22 check reads it: a `for` counting with range/trange/count (also inside tqdm or
    enumerate) or named for epochs, or a `while`, around an inner `for` over the batches."""
    if not isinstance(s, (cst.For, cst.While)) or not h.m.findall(s.body, h.m.For()):
        return False
    if isinstance(s, cst.While):
        return True
    if "epoch" in (h.code(s.target) + " " + h.code(s.iter)).lower():
        return True
    call = s.iter
    while isinstance(call, cst.Call) and h.last(h.call_name(call)) in _WRAPPERS and call.args:
        call = call.args[0].value
    return isinstance(call, cst.Call) and h.last(h.call_name(call)) in _COUNTERS


def _epoch_name(s, taken: set[str]) -> tuple[object, str | None, list]:
    """(the loop, rewritten where needed, the name of its epoch number, statements to put before it)."""
    if isinstance(s, cst.While):  # a pass over the loader per turn: count the turns
        name = "epoch" if "epoch" not in taken else "sampler_epoch"
        return s, name, [h.stmt(f"{name} = 0")]
    target = s.target
    if isinstance(target, cst.Name):
        if target.value == "_":
            if "epoch" in taken:
                return s, None, []
            return s.with_changes(target=cst.Name("epoch")), "epoch", []
        return s, target.value, []
    if isinstance(target, cst.Tuple):  # for i, epoch in enumerate(range(n))
        names = [h.code(e.value) for e in target.elements]
        pick = next((n for n in names if "epoch" in n), names[-1] if names else None)
        return s, pick, []
    return s, None, []


def sampler_set_epoch(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)
    if "DistributedSampler" not in text:
        raise NotApplicable(f"{path}: uses no DistributedSampler (see P3 for giving each rank its own shard)")
    # the samplers lint reports (a second one's set_epoch does not reseed the training sampler's shuffle)
    flagged = h.flagged_lines(text, path, "D22")
    if ".set_epoch(" in text and not flagged:
        raise NotApplicable(f"{path}: already calls set_epoch")
    wanted = {line.split("=", 1)[0].strip() for line in flagged if "=" in line.split("(", 1)[0]}
    samplers = {n: scope for n, scope in _sampler_names(module).items() if not wanted or n in wanted}
    taken = h.variable_names(module)
    done = []

    def rewrite(stmts, block):
        out = []
        for s in stmts:
            if _pass_loop(s) and not done:
                s, epoch, before = _epoch_name(s, taken)
                if epoch is None:
                    out.append(s)
                    continue
                # a sampler that is another function's local is out of reach here: the loader carries it
                local = [n for n, scope in samplers.items() if _visible(n, scope, block)]
                if local:
                    sampler = local[0]
                elif wanted and ".set_epoch(" in text:
                    out.append(s)  # the sampler lint reports is out of this loop's reach by name
                    continue
                else:
                    loader = h.dotted(h.m.findall(s.body, h.m.For())[0].iter)
                    if not loader:
                        out.append(s)
                        continue
                    sampler = f"{loader}.sampler"
                calls = [h.stmt(f"{name}.set_epoch({epoch})") for name in (local or [sampler])]
                if before:  # a while loop: the count moves on with each pass
                    calls.append(h.stmt(f"{epoch} += 1"))
                    out += [b.with_changes(leading_lines=s.leading_lines) for b in before]
                    s = s.with_changes(leading_lines=())
                s = s.with_changes(body=s.body.with_changes(body=[*calls, *s.body.body]))
                done.append(sampler)
            out.append(s)
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not done:
        raise NotApplicable(f"{path}: no epoch loop (`for epoch in range(...)`, or a `while` around a loop over the "
                            "loader) found")
    return module.code, [f"{done[0]}.set_epoch(epoch) reseeds the shuffle so every epoch sees a new order"]


def _saved_state(module: cst.Module):
    """(save call, path expression, {key: target}) of a torch.save of a dict of state_dicts."""
    for call in h.calls(module):
        if h.call_name(call) not in ("torch.save", "save") or len(call.args) < 2:
            continue
        state = call.args[0].value
        if not isinstance(state, cst.Dict):
            continue
        keys = {}
        for el in state.elements:
            if not isinstance(el, cst.DictElement) or not isinstance(el.key, cst.SimpleString):
                continue
            value = el.value
            if isinstance(value, cst.Call) and h.last(h.call_name(value)) == "state_dict":
                keys[el.key.evaluated_value] = h.dotted(value.func.value)
            elif h.dotted(value):
                keys[el.key.evaluated_value] = "=" + h.dotted(value)
        path = call.args[1].value
        for rep in h.calls(module):  # a save to a temp name renamed into place resumes from the final name
            if h.last(h.call_name(rep)) in ("replace", "rename") and len(rep.args) == 2 \
                    and rep.args[0].value.deep_equals(path):
                path = rep.args[1].value
        return call, path, keys
    return None


def load_latest_checkpoint(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)
    if "torch.load(" in text or ".load_state_dict(" in text:
        raise NotApplicable(f"{path}: already loads a checkpoint")
    found = _saved_state(module)
    if found is None:
        raise NotApplicable(f"{path}: saves no dict of state_dicts with torch.save; save the model, optimizer and "
                            "epoch together first (MN5's steps)")
    save, ckpt, keys = found
    ckpt_code = repr(str(facts["checkpoint"])) if facts.get("checkpoint") else h.code(ckpt)
    loads = [f"{target}.load_state_dict(checkpoint[{json.dumps(key)}])" for key, target in keys.items() if not target.startswith("=")]
    if not loads:
        raise NotApplicable(f"{path}: the saved dict holds no state_dict() to load back")
    epoch_key = next((k for k, t in keys.items() if t.startswith("=") and "epoch" in t), None)
    notes = []
    done = []

    def rewrite(stmts, block):
        out = []
        for s in stmts:
            if _epoch_loop(s) and not done and any(c.deep_equals(save) for c in h.calls(s)):
                loop_vars = {h.code(s.target)} | {h.dotted(t.target) for t in h.m.findall(s.body, h.m.AssignTarget())}
                if any(h.uses_name(ckpt, v) for v in loop_vars if v):
                    raise NotApplicable(f"{path}: the checkpoint name changes every epoch; save to one fixed path "
                                        "(or give --param checkpoint=PATH) so a restart can find it")
                body = [f"if os.path.exists({ckpt_code}):",
                        f'    checkpoint = torch.load({ckpt_code}, map_location="cpu")',
                        *[f"    {line}" for line in loads]]
                head = [h.stmt("start_epoch = 0").with_changes(leading_lines=s.leading_lines)] if epoch_key else []
                if epoch_key:
                    body.append(f'    start_epoch = checkpoint[{json.dumps(epoch_key)}] + 1')
                    args = s.iter.args
                    if len(args) == 1 or (len(args) == 2 and h.code(args[0].value) == "0"):
                        s = s.with_changes(iter=s.iter.with_changes(
                            args=[cst.Arg(h.expr("start_epoch"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                                  args[-1]]))
                    else:
                        notes.append("the epoch loop does not start at 0: make it start at start_epoch")
                else:
                    notes.append("the checkpoint holds no epoch: store it too, or training restarts its epoch count")
                cond = cst.parse_statement("\n".join(body) + "\n")
                if not head:
                    cond = cond.with_changes(leading_lines=s.leading_lines)
                out += [*head, cond, s.with_changes(leading_lines=())]
                done.append(s)
                continue
            out.append(s)
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not done:
        raise NotApplicable(f"{path}: no epoch loop around the torch.save to resume")
    module = h.add_import(module, "import os", "os")
    notes.append("a restarted worker (torchrun --max-restarts) now resumes from the newest checkpoint")
    return module.code, notes


# transformers' TrainingArguments and the trainers' configs built on it (trl), which all take save_on_each_node
TRAINING_ARGS = ("TrainingArguments", "Seq2SeqTrainingArguments", "SFTConfig", "DPOConfig", "GRPOConfig", "PPOConfig",
                 "RewardConfig", "ORPOConfig", "KTOConfig", "CPOConfig")


def save_on_each_node(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """MN7: TrainingArguments(..., save_on_each_node=True), so that every node keeps a complete checkpoint."""
    module = h.parse(text, path)
    changed = []

    def fix(call):
        if h.last(h.call_name(call)) not in TRAINING_ARGS or h.kwarg(call, "save_on_each_node") is not None:
            return None
        changed.append(call)
        return h.add_kwarg(call, "save_on_each_node", h.expr("True"))

    module = h.replace_calls(module, fix)
    if not changed:
        raise NotApplicable(f"{path}: no TrainingArguments(...) call without save_on_each_node=")
    return module.code, ["every node now writes a complete checkpoint of its own to output_dir (the disk space of one "
                         "checkpoint per node); a directory every node mounts is the better fix where there is one"]
