"""Which calls issue a collective: torch.distributed and friends, and library calls that sync inside."""
from __future__ import annotations

import ast

# module prefix (after import aliases are resolved) -> function names that are collectives
COLLECTIVE_FUNCS = {
    "torch.distributed": {
        "barrier", "monitored_barrier", "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor",
        "_all_gather_base", "reduce", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
        "broadcast", "broadcast_object_list", "gather", "gather_object", "scatter", "scatter_object_list",
        "all_to_all", "all_to_all_single", "new_group", "new_subgroups", "all_reduce_coalesced",
    },
    "deepspeed.comm": {"barrier", "all_reduce", "all_gather", "broadcast", "reduce", "reduce_scatter",
                       "all_to_all_single", "gather", "scatter", "all_gather_into_tensor"},
    "torch_xla.core.xla_model": {"rendezvous", "mesh_reduce", "all_reduce", "all_gather", "reduce_scatter",
                                 "all_to_all"},
    "horovod.torch": {"allreduce", "allreduce_", "allgather", "broadcast", "broadcast_", "broadcast_parameters",
                      "broadcast_optimizer_state", "broadcast_object", "allgather_object", "join", "barrier",
                      "alltoall", "grouped_allreduce"},
    "accelerate.utils": {"gather", "gather_object", "reduce", "broadcast", "broadcast_object_list",
                         "wait_for_everyone", "pad_across_processes"},
    "torch.distributed.checkpoint": {"save", "load", "save_state_dict", "load_state_dict", "async_save"},
    "torch.distributed.checkpoint.state_dict": {"get_model_state_dict", "get_optimizer_state_dict",
                                                "get_state_dict"},
    "deepspeed.zero": {"GatheredParameters"},
}
# methods that are collectives on any receiver
ANY_RECEIVER = {"barrier", "wait_for_everyone", "all_reduce", "all_gather", "all_gather_object",
                "reduce_scatter", "broadcast_object_list", "gather_for_metrics", "save_16bit_model",
                "save_fp16_model", "full_optim_state_dict", "_zero3_consolidated_16bit_state_dict",
                "consolidated_16bit_state_dict"}
# receiver name fragment -> methods that sync through it
BY_RECEIVER = {
    "accelerator": {"gather", "reduce", "pad_across_processes", "save_state", "save_model", "get_state_dict"},
    "fabric": {"broadcast", "save", "load"},
    "strategy": {"reduce", "broadcast", "save_checkpoint"},
    "hvd": {"allreduce", "allgather", "broadcast", "broadcast_parameters", "join"},
    "xm": {"rendezvous", "mesh_reduce"},
    "comm": {"synchronize", "all_gather", "gather", "reduce_dict"},  # detectron2-style comm helpers
}
FSDP_NAMES = {"FullyShardedDataParallel", "FSDP", "fully_shard"}


def describe(call: ast.Call) -> str:
    text = ast.unparse(call.func)
    return f"{text}()" if len(text) < 60 else f"{text[:57]}...()"


def collective_of(site, script) -> str | None:
    """A short description of the collective this call issues, or None."""
    call = site.node
    name = site.name  # resolved dotted name of the callee, e.g. torch.distributed.barrier
    attr = site.attr
    if name:
        prefix, _, fn = name.rpartition(".")
        for module in (prefix, prefix.replace(".distributed_c10d", "")):
            if fn in COLLECTIVE_FUNCS.get(module, ()):
                return describe(call)
        if fn in ("full_optim_state_dict", "optim_state_dict", "sharded_optim_state_dict") and \
                prefix.rsplit(".", 1)[-1] in FSDP_NAMES:
            return describe(call)
    if not isinstance(call.func, ast.Attribute):
        return _sync_model_forward(site, script)
    recv = site.recv_last or ""
    if attr in ANY_RECEIVER:
        return describe(call)
    low = recv.lower()
    for fragment, methods in BY_RECEIVER.items():
        if attr in methods and (low == fragment or low.endswith(fragment) or low.endswith(fragment + "s")):
            if fragment == "comm" and script.resolve(site.recv or "").startswith("torch.distributed"):
                continue
            return describe(call)
    if attr == "save_checkpoint" and (script.imports_any("deepspeed", "lightning", "pytorch_lightning")
                                      or "trainer" in low or "engine" in low):
        return describe(call) + " (synchronises all ranks)"
    if attr in ("log", "log_dict") and any(k.arg == "sync_dist" and _truthy(k.value) for k in call.keywords):
        return describe(call) + " with sync_dist=True"
    if attr in ("compute", "sync") and recv in script.metric_names:
        return describe(call) + " (a torchmetrics metric all_gathers its state)"
    if attr in ("state_dict", "optim_state_dict") and recv in script.fsdp_names and script.full_state_dict:
        return describe(call) + " (a full FSDP state_dict gathers every shard)"
    return None


def _sync_model_forward(site, script) -> str | None:
    """A SyncBatchNorm model in training mode all-reduces batch statistics; a DDP model with buffers
    (BatchNorm running stats) broadcasts them from rank 0 at every forward, in eval mode too."""
    call = site.node
    if not isinstance(call.func, ast.Name):
        return None
    name = call.func.id
    if name in script.syncbn_names and not script.eval_before(name, site):
        return f"{name}(...) forward through SyncBatchNorm (all-reduces batch statistics)"
    if name in script.ddp_buffer_names:
        return f"{name}(...) forward through DDP (broadcasts buffers from rank 0; call {name}.module(...))"
    return None


def _truthy(node: ast.AST) -> bool:
    return not (isinstance(node, ast.Constant) and not node.value)
