"""An out-of-memory printed while DeepSpeed was still setting up ZeRO, told by the engine's own INFO lines (D16)."""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

# Lines DeepSpeed prints when it starts building the ZeRO optimizer, by the code that prints them:
#   runtime/engine.py _configure_zero_optimizer: log_dist('Creating fp16 ZeRO stage {} optimizer') (0.3-0.8, also
#     logging.info / logger.info in 0.1-0.2), log_dist(f'Creating {model_dtype} ZeRO stage {zero_stage} optimizer')
#     (0.9-0.16, model_dtype being torch.float16 / torch.bfloat16 / torch.float32)
#   runtime/zero/stage_1_and_2.py __init__ (rank 0): logger.info(f"Reduce bucket size {reduce_bucket_size}")
#   runtime/zero/stage3.py __init__: see_memory_usage("Stage 3 initialize beginning", force=True)
#   both stages: see_memory_usage("Before initializing optimizer states" / "Before creating fp16|fp32 partitions")
_SETUP_BEGINS = _lazy(r"Creating (?:fp16|bf16|fp32|torch\.\w+) ZeRO stage (?P<stage>[0-3]) optimizer|"
                           r"\bReduce bucket size \d+|Stage 3 initialize beginning|"
                           r"Before initializing optimizer states|Before creating fp(?:16|32) partitions")
# ... and the ones that say it got through: see_memory_usage("After initializing ZeRO optimizer"),
# logger.info("optimizer state initialized") (stage_1_and_2.py), log_dist("DeepSpeed Final Optimizer = {}")
# (engine.py _configure_optimizer), log_dist("DeepSpeed LR Scheduler = {}") and "DeepSpeedEngine configuration:"
# (engine.py, printed once the optimizer is built), transformers' Trainer "***** Running training *****" (trainer.py, printed after
# deepspeed_init), anything a training step prints, and a frame of the step itself (a traceback through the engine's
# step, backward or forward was raised after set-up).
_SETUP_ENDS = _lazy(r"After initializing ZeRO optimizer|optimizer state initialized|DeepSpeed Final Optimizer = |"
                         r"DeepSpeed LR Scheduler = |DeepSpeedEngine configuration|"
                         r"\*\*\*\*\* Running training \*\*\*\*\*|"
                         r"[{ ,]'loss': |\bit/s\]|\bs/it\]|\bsteps?[=: ]+\d+\b.*\bloss\b|\[deepspeed\] OVERFLOW!|"
                         r", in (?:step|_take_model_step|backward|forward|train_batch|training_step\w*)\b")
# torch's allocator message (c10/cuda/CUDACachingAllocator.cpp) and its exception class, on the line itself
_OOM = _lazy(r"CUDA out of memory|OutOfMemoryError|HIP out of memory")
_FRAMEISH = _lazy(r"""\.py["']?(?:, line |:)\d+|\.py\(\d+\)""")


def oom_during_zero_setup(text: str, file: str) -> tuple[Evidence, Evidence] | None:
    """(the OOM line, the set-up line it followed) when a CUDA OOM comes after DeepSpeed began building the ZeRO
    optimizer and before any line that says the build finished or training began; None otherwise."""
    begun: tuple[int, str] | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if _SETUP_ENDS.search(line):
            begun = None
        elif _SETUP_BEGINS.search(line):
            begun = (n, line)
        elif begun is not None and _OOM.search(line) and not _FRAMEISH.search(line):
            return (Evidence(file, n, line, "rule:oom-during-zero-setup"),
                    Evidence(file, begun[0], f"DeepSpeed was still setting up ZeRO: {begun[1].strip()[:200]}",
                             "because"))
    return None
