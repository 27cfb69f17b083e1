"""A DeepSpeed ds_config.json read the way DeepSpeed and the HF integration read it (D16, D17, D18)."""
from __future__ import annotations

import difflib
from typing import Any, Mapping

# Top-level keys DeepSpeed reads (runtime/constants.py and the feature configs). Top-level keys it does not
# read are silently ignored, so only a near-miss of a known key is reported (a typo that does nothing).
TOP_LEVEL = frozenset("""
train_batch_size train_micro_batch_size_per_gpu gradient_accumulation_steps optimizer scheduler fp16 bf16
bfloat16 amp gradient_clipping zero_optimization zero_allow_untested_optimizer zero_force_ds_cpu_optimizer
steps_per_print wall_clock_breakdown memory_breakdown dump_state prescale_gradients gradient_predivide_factor
sparse_gradients communication_data_type seq_parallel_communication_data_type disable_allgather fp32_allreduce
activation_checkpointing flops_profiler aio tensorboard wandb csv_monitor comet comms_logger autotuning
elasticity pipeline compression_training data_efficiency curriculum_learning checkpoint data_types
dataloader_drop_last eigenvalue progressive_layer_drop sparse_attention nebula hybrid_engine weight_quantization
quantize_training compile torch_autocast timers graph_harvesting tensor_parallel vocabulary_size
use_data_before_expert_parallelism
""".split())

# DeepSpeedZeroConfig forbids unknown fields (pydantic extra="forbid"): a typo here stops deepspeed.initialize.
ZERO_KEYS = frozenset("""
stage contiguous_gradients reduce_scatter reduce_bucket_size use_multi_rank_bucket_allreduce allgather_partitions
allgather_bucket_size overlap_comm load_from_fp32_weights elastic_checkpoint offload_param offload_optimizer
sub_group_size cpu_offload_param cpu_offload_use_pin_memory cpu_offload stage3_prefetch_bucket_size
prefetch_bucket_size stage3_param_persistence_threshold param_persistence_threshold
stage3_model_persistence_threshold model_persistence_threshold stage3_max_live_parameters max_live_parameters
stage3_max_reuse_distance max_reuse_distance stage3_gather_16bit_weights_on_model_save
gather_16bit_weights_on_model_save stage3_module_granularity_threshold module_granularity_threshold
stage3_use_all_reduce_for_fetch_params use_all_reduce_for_fetch_params stage3_gather_fp16_weights_on_model_save
ignore_unused_parameters legacy_stage1 round_robin_gradients zero_hpz_partition_size zero_quantized_weights
zero_quantized_nontrainable_weights zero_quantized_gradients zeropp_loco_param mics_shard_size
mics_hierarchical_params_gather memory_efficient_linear pipeline_loading_checkpoint override_module_apply
log_trace_cache_warnings
""".split())

# Keys the HF Trainer integration fills from TrainingArguments when they are "auto"; a fixed value must
# agree with TrainingArguments or the Trainer stops with a list of mismatches.
HF_FILLED = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
             "gradient_clipping", "optimizer.params.lr", "optimizer.params.weight_decay", "optimizer.params.betas",
             "optimizer.params.eps", "scheduler.params.warmup_num_steps", "scheduler.params.total_num_steps",
             "scheduler.params.warmup_max_lr", "fp16.enabled", "bf16.enabled")


def lookup(config: Mapping, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def check(config: Mapping, world_size: int | None = None,
          accum_elsewhere: int | None = None) -> tuple[list[tuple[str, str]], list[str]]:
    """(problems tagged with their entry, notes) for one parsed ds_config."""
    problems: list[tuple[str, str]] = []
    notes: list[str] = []
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, Mapping):
        zero = {}
    stage = zero.get("stage", 0)
    offload_param = lookup(zero, "offload_param.device")
    offload_opt = lookup(zero, "offload_optimizer.device")
    notes.append(f"ZeRO stage {stage}; offload optimizer: {offload_opt or 'none'}, params: {offload_param or 'none'}")
    if stage not in (0, 1, 2, 3, "auto"):
        problems.append(("D16", f"zero_optimization.stage={stage!r}: DeepSpeed knows stages 0-3"))
    if offload_param not in (None, "none") and isinstance(stage, int) and stage < 3:
        problems.append(("D16", f"offload_param needs ZeRO stage 3 (stage is {stage})"))
    for key, device in (("offload_param", offload_param), ("offload_optimizer", offload_opt)):
        if device == "nvme" and not lookup(zero, f"{key}.nvme_path"):
            problems.append(("D16", f"{key}.device is nvme but {key}.nvme_path is not set"))
    ratio = lookup(zero, "offload_optimizer.ratio")
    if _number(ratio) is not None and ratio < 1 and stage != 3:
        problems.append(("D16", "a partial offload_optimizer.ratio works only with ZeRO stage 3"))
    for key in zero:
        if key not in ZERO_KEYS:
            near = difflib.get_close_matches(key, ZERO_KEYS, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            problems.append(("D17", f"zero_optimization.{key} is not a ZeRO key: deepspeed.initialize "
                                    f"rejects it{hint}"))
    for key in config:
        if key not in TOP_LEVEL:
            near = difflib.get_close_matches(key, TOP_LEVEL, n=1, cutoff=0.8)
            if near:
                problems.append(("D17", f"{key} is not a DeepSpeed key (did you mean {near[0]}?): "
                                        "DeepSpeed ignores it"))
            else:
                notes.append(f"{key}: not a key this probe knows DeepSpeed to read")
    fp16, bf16 = lookup(config, "fp16.enabled"), lookup(config, "bf16.enabled")
    notes.append(f"precision: bf16 {bf16 if bf16 is not None else 'off'}, fp16 {fp16 if fp16 is not None else 'off'}")
    if fp16 is True and bf16 is True:
        problems.append(("D17", "fp16 and bf16 are both enabled: DeepSpeed refuses to start"))
    accum = config.get("gradient_accumulation_steps")
    if _number(accum) is not None and accum_elsewhere is not None:
        problems.append(("D18", f"gradient_accumulation_steps is {accum:g} in the JSON and {accum_elsewhere} "
                                "elsewhere: set it in one place ('auto' in the JSON)"))
    micro, total = config.get("train_micro_batch_size_per_gpu"), config.get("train_batch_size")
    if world_size and all(_number(v) is not None for v in (micro, total, accum)):
        if micro * accum * world_size != total:
            problems.append(("D17", f"train_batch_size {total:g} != micro {micro:g} x accumulation {accum:g} x "
                                    f"world {world_size}: DeepSpeed asserts on this"))
    fixed = [key for key in HF_FILLED if lookup(config, key) not in (None, "auto")]
    if fixed:
        notes.append("D18: fixed (non-'auto') values the HF Trainer also sets from TrainingArguments; they must "
                     "match or the Trainer stops: " + ", ".join(fixed))
    return problems, notes
