"""Code patches by name: each takes (source, path, facts) and returns (new source, notes) or raises NotApplicable."""
from __future__ import annotations

import importlib

# patch name -> "module:function" under this package; libcst is imported only when a patch runs
PATCHES = {
    "device-from-local-rank": "device:device_from_local_rank",
    "find-unused-parameters": "ddp:find_unused_parameters",
    "non-reentrant-checkpoint": "ddp:non_reentrant_checkpoint",
    "sync-batchnorm": "ddp:sync_batchnorm",
    "init-timeout": "ddp:init_timeout",
    "trainer-ddp-timeout": "ddp:trainer_ddp_timeout",
    "move-before-ddp": "ddp:move_before_ddp",
    "distributed-sampler": "data:distributed_sampler",
    "dataparallel-to-ddp": "ddp:dataparallel_to_ddp",
    "join-uneven-inputs": "loops:join_uneven_inputs",
    "sampler-set-epoch": "loops:sampler_set_epoch",
    "load-latest-checkpoint": "loops:load_latest_checkpoint",
    "save-on-each-node": "loops:save_on_each_node",
    "collective-out-of-rank-branch": "ranks:collective_out_of_rank_branch",
    "rank-zero-side-effects": "ranks:rank_zero_side_effects",
    "low-cpu-mem-usage": "loading:low_cpu_mem_usage",
    "accumulation-no-sync": "accum:accumulation_no_sync",
    "fsdp-reduce-dtype": "fsdp:fsdp_reduce_dtype",
    "full-state-dict-offload": "fsdp:full_state_dict_offload",
    "fsdp-auto-wrap": "fsdp:fsdp_auto_wrap",
    "move-targets": "targets:move_targets",
    "init-before-ddp": "init_order:init_before_ddp",
    "reshape-on-every-rank": "reshape:reshape_on_every_rank",
    "lazy-shapes-before-ddp": "reshape:lazy_shapes_before_ddp",
    "collective-skip": "skips:collective_skip",
    "fsdp-sharding-strategy": "sharding:fsdp_sharding_strategy",
    "lr-scale-world-size": "lr_scale:lr_scale_world_size",
    "local-rank-both-spellings": "args:local_rank_both_spellings",
    "engine-backward": "ds_engine:engine_backward",
    "master-port-setdefault": "port:master_port_setdefault",
}


def get(name: str):
    module_name, func = PATCHES[name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module_name}"), func)
