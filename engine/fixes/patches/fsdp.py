"""FSDP patches: D12, the root as the only unit; D14, a mixed-precision policy that leaves the gradient reduction to
follow a 16-bit param dtype; D15, a full state dict gathered for a save onto every GPU."""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.checks.d12_fsdp_without_wrap_policy import FSDP1, MANUAL, root_only
from gpudoctor.engine.lint.checks.d14_mixed_precision_half_set import POLICIES, half_set
from gpudoctor.engine.lint.checks.d15_full_state_dict_on_gpu import SETTERS, STATE_CALLS, full_without_offload, saves

DEFAULT_MIN_PARAMS = 100_000_000  # size_based_auto_wrap_policy's own default


def fsdp_reduce_dtype(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """`MixedPrecision(param_dtype=torch.bfloat16)` (FSDP1) or `MixedPrecisionPolicy(...)` (FSDP2) gains
    `reduce_dtype=torch.float32`: compute stays in 16 bits, the gradients are summed across ranks in 32. The same
    calls the lint's D14 check reports; a policy whose reduction dtype is chosen, or built from **kwargs, is left."""
    module = h.parse(text, path)
    fixed: list[str] = []

    def fix(call: cst.Call):
        if h.last(h.call_name(call)) not in POLICIES:
            return None
        dtype = half_set(h.ast_expr(call))
        if dtype is None:
            return None
        fixed.append(f"{h.last(h.call_name(call))}(param_dtype={dtype})")
        return h.add_kwarg(call, "reduce_dtype", h.expr("torch.float32"))

    module = h.replace_calls(module, fix)
    if not fixed:
        raise NotApplicable(f"{path}: no FSDP mixed-precision policy with a 16-bit param_dtype and no reduce_dtype")
    module = h.add_import(module, "import torch", "torch")
    return module.code, [f"{fixed[0]} now reduces gradients in float32 (reduce_dtype=torch.float32); forward and "
                         "backward still compute in 16 bits, and the reduction moves twice the bytes, which is "
                         "what a stable run costs. buffer_dtype is left as it was: set it if buffers should be cast"]


def _state_names(stmts) -> set[str]:
    """Names bound to a state dict in these statements: `sd = model.state_dict()`, `osd = FSDP.optim_state_dict(...)`."""
    names = set()
    for stmt in stmts:
        for assign in h.m.findall(stmt, h.m.Assign()):
            if isinstance(assign.value, cst.Call) and h.last(h.call_name(assign.value)) in STATE_CALLS:
                names |= {t.target.value for t in assign.targets if isinstance(t.target, cst.Name)}
    return names


def _read_on_rank0_only(scope, names: set[str]) -> bool:
    """Every read of the names in the scope sits under a rank-0 test, so the other ranks may get an empty dict."""
    if not names:
        return False
    total = sum(len(h.m.findall(scope, h.m.Name(n))) - len(h.m.findall(scope, h.m.AssignTarget(h.m.Name(n))))
                for n in names)
    gated = [i for i in h.m.findall(scope, h.m.If()) if h.is_rank0_test(i.test)]
    inside = sum(len(h.m.findall(i.body, h.m.Name(n))) for i in gated for n in names)
    return total > 0 and inside >= total


def full_state_dict_offload(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """`FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT)` around a save gains
    `FullStateDictConfig(offload_to_cpu=True[, rank0_only=True])`: the gathered tensors go to host memory instead of
    each GPU. rank0_only=True only where every read of the gathered dict is under a rank-0 test (the other ranks
    then get an empty dict and hold no copy at all). The calls the lint's D15 check reports; loads are left."""
    module = h.parse(text, path)
    for call in h.calls(module):
        device = h.kwarg(call, "device_id") if h.last(h.call_name(call)) in ("FSDP", "FullyShardedDataParallel") else None
        if device is not None and "cpu" in h.code(device.value):
            # torch 2.13 measured here: offload_to_cpu on an FSDP1 model that lives on the CPU fails in state_dict()
            raise NotApplicable(f"{path}: the FSDP model lives on the CPU, where offload_to_cpu has nothing to move")
    done: list[bool] = []
    taken = h.variable_names(module)
    config_name = next(n for n in ("save_config", "full_state_config", "fsdp_save_config") if n not in taken)

    def config_for(call: cst.Call, rank0_only: bool) -> cst.Call:
        existing = h.kwarg(call, "state_dict_config") or (call.args[2] if len(call.args) > 2 else None)
        if existing is not None:  # an inline FullStateDictConfig(...) without offload: it gains the flag
            config = existing.value
            flag = h.kwarg(config, "offload_to_cpu") or (config.args[0] if config.args and config.args[0].keyword is None
                                                           else None)
            inner = (config.with_changes(args=[a.with_changes(value=cst.Name("True")) if a is flag else a
                                               for a in config.args]) if flag is not None
                     else h.add_kwarg(config, "offload_to_cpu", cst.Name("True")))
            if rank0_only:  # the note says so: the other ranks then hold an empty dict, not a copy in host memory
                only = h.kwarg(inner, "rank0_only") or (inner.args[1] if len(inner.args) > 1
                                                        and inner.args[1].keyword is None else None)
                inner = (inner.with_changes(args=[a.with_changes(value=cst.Name("True")) if a is only else a
                                                  for a in inner.args]) if only is not None
                         else h.add_kwarg(inner, "rank0_only", cst.Name("True")))
            return call.with_changes(args=[a.with_changes(value=inner) if a is existing else a for a in call.args])
        if any(a.keyword is not None for a in call.args):
            return h.add_kwarg(call, "state_dict_config", cst.Name(config_name))
        return call.with_changes(args=[*call.args[:-1], call.args[-1].with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(cst.Name(config_name))])

    def rewrite(stmts, block):
        out = []
        scope = block.scope or module
        for s in stmts:
            if isinstance(s, cst.With):
                region = list(s.body.body) if isinstance(s.body, cst.IndentedBlock) else [s.body]
                items = list(s.items)
                for k, item in enumerate(items):
                    call = item.item
                    if _reports(call, s):
                        rank0 = _read_on_rank0_only(scope, _state_names(region))
                        inline = h.kwarg(call, "state_dict_config") or (call.args[2] if len(call.args) > 2 else None)
                        items[k] = item.with_changes(item=config_for(call, rank0))
                        done.append(rank0)
                        if inline is None:  # the config on its own line before the block, as FSDP's docs write it
                            extra = ", rank0_only=True" if rank0 else ""
                            out.append(h.stmt(f"{config_name} = FullStateDictConfig(offload_to_cpu=True{extra})")
                                       .with_changes(leading_lines=s.leading_lines))
                            s = s.with_changes(leading_lines=())
                s = s.with_changes(items=items)
            out.append(s)
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not done:
        raise NotApplicable(f"{path}: no FULL_STATE_DICT save without offload_to_cpu (a `with FSDP.state_dict_type"
                            "(...)` block that takes a state dict)")
    module = h.add_import(module, "from torch.distributed.fsdp import FullStateDictConfig", "FullStateDictConfig")
    notes = ["the full state dict is gathered into host memory (offload_to_cpu=True), not onto each GPU"]
    notes.append("rank0_only=True: it is read only under a rank-0 test, so the other ranks receive an empty dict"
                 if all(done) else "rank0_only is left off where the gathered dict is read on every rank: each rank "
                 "then holds a host copy; gate those reads on rank 0 and add rank0_only=True to save host RAM (D28)")
    return module.code, notes


def _reports(call, with_stmt) -> bool:
    """The lint's D15 predicate on the same source: a full state dict without offload, around a save."""
    if not isinstance(call, cst.Call) or h.last(h.call_name(call)) not in SETTERS:
        return False
    return full_without_offload(h.ast_expr(call)) and saves(h.ast_stmts(with_stmt)[0].body)


def fsdp_auto_wrap(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """The one FSDP1 constructor of a script that wraps only the root gains
    `auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=N)` (N from --param
    min_num_params, 100M by default, torch's own default): every submodule of at least N parameters becomes its own
    unit, gathered only while it runs. The call the lint's D12 check reports; a script that wraps by hand is left."""
    try:
        threshold = int(float(facts.get("min_num_params") or DEFAULT_MIN_PARAMS))
    except (TypeError, ValueError):
        raise NotApplicable(f"{path}: min_num_params must be a number of parameters (e.g. 100000000)") from None
    if threshold < 1:
        raise NotApplicable(f"{path}: min_num_params must be at least 1")
    module = h.parse(text, path)
    names = {n.value for n in h.m.findall(module, h.m.Name())}  # identifiers and attribute names alike
    if names & {*MANUAL, "fully_shard"}:
        raise NotApplicable(f"{path}: the script builds its FSDP units itself (wrap, enable_wrap or fully_shard)")
    sites = [c for c in h.calls(module) if h.last(h.call_name(c)) in FSDP1]
    if len(sites) != 1 or not root_only(h.ast_expr(sites[0])):
        raise NotApplicable(f"{path}: no single FSDP(...) without an auto_wrap_policy"
                            + (f" ({len(sites)} FSDP calls: the units are built by hand)" if len(sites) > 1 else ""))
    policy = h.expr(f"functools.partial(size_based_auto_wrap_policy, min_num_params={threshold:_})")
    module = h.replace_calls(module, lambda c: h.add_kwarg(c, "auto_wrap_policy", policy)
                             if h.last(h.call_name(c)) in FSDP1 else None)  # the one FSDP call, as checked above
    module = h.add_import(module, "import functools", "functools")
    module = h.add_import(module, "from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy",
                          "size_based_auto_wrap_policy")
    return module.code, [f"every submodule of at least {threshold:,} parameters becomes its own FSDP unit, so only "
                         "the unit running holds full parameters; for a transformer, transformer_auto_wrap_policy "
                         "with its block class gives one unit per block (--param min_num_params=N moves the cut)"]
