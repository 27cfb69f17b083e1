"""An out-of-memory while DeepSpeed was still setting up ZeRO, told by its frames or its own INFO lines (D16)."""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

# --- the frames of ZeRO's set-up, by the functions that build the optimizer state ---------------------------------
# runtime/zero/stage_1_and_2.py (0.5-0.16; stage2.py / stage1.py in 0.3-0.4) DeepSpeedZeroOptimizer: __init__ (flat
#   bit16 groups, the fp32 partitions), initialize_optimizer_states, initialize_gradient_partitioning_data_structures,
#   _link_all_hp_params, _create_param_mapping;
# runtime/zero/stage3.py (0.3-0.16) DeepSpeedZeroOptimizer_Stage3: __init__, _setup_for_real_optimizer,
#   _create_fp16_partitions_with_defragmentation, _create_fp32_partitions, _create_fp16_sub_groups,
#   _create_param_groups_fp16_flat_cpu_memory, _create_next_swappable_fp32_groups, initialize_optimizer_states;
# runtime/bf16_optimizer.py (0.6-0.16) BF16_Optimizer: __init__, _setup_for_real_optimizer, initialize_optimizer_states;
# runtime/engine.py: _configure_zero_optimizer, _configure_bf16_optimizer, and _configure_distributed_model (the full
#   model moved to the GPU, which only fits when the stage leaves whole weights on each rank);
# 0.1-0.2: pt/deepspeed_light.py _configure_zero_optimizer, pt/deepspeed_zero_optimizer.py (FP16_DeepSpeedZeroOptimizer)
# and pt/zero_optimizer_stage1.py. Plain, IPython ("File x.py:12, in Cls.f(...)") and Rich ("x.py:12 in f") frames.
_DS = r"deepspeed[/\\](?:runtime[/\\](?:zero[/\\]stage\w*|bf16_optimizer|engine)|pt[/\\]\w+)\.py\b"
_OPTIMIZER_FILE = r"deepspeed[/\\](?:runtime[/\\](?:zero[/\\]stage\w*|bf16_optimizer)|pt[/\\](?:deepspeed_)?zero\w*)\.py\b"
_SETUP_FN = (r"initialize_optimizer_states|_create_fp32_partitions|_setup_for_real_optimizer|_configure_zero_optimizer|"
             r"_configure_bf16_optimizer|_configure_distributed_model|_create_fp16_partitions\w*|_create_fp16_sub_groups|"
             r"_create_param_groups_fp16_flat_cpu_memory|_create_next_swappable_fp32_groups|_link_all_hp_params|"
             r"_create_param_mapping|initialize_gradient_partitioning_data_structures|"
             r"DeepSpeedZeroOptimizer(?:_Stage3)?\(|BF16_Optimizer\(")
SETUP_FRAME = _lazy(rf"{_DS}.*?\b(?:{_SETUP_FN})|{_OPTIMIZER_FILE}.*?\b__init__\b")
# the functions that allocate the optimizer state itself, for a traceback cut off before its exception line
_ALLOCATING = _lazy(r"\b(?:initialize_optimizer_states|_create_fp32_partitions|_setup_for_real_optimizer|"
                    r"_create_fp16_partitions\w*|_create_param_groups_fp16_flat_cpu_memory|"
                    r"_create_next_swappable_fp32_groups)\b")

# Lines DeepSpeed prints when it starts building the ZeRO optimizer, by the code that prints them:
#   runtime/engine.py _configure_zero_optimizer: log_dist('Creating fp16 ZeRO stage {} optimizer') (0.3-0.8, also
#     logging.info / logger.info in 0.1-0.2), log_dist(f'Creating {model_dtype} ZeRO stage {zero_stage} optimizer')
#     (0.9-0.16, model_dtype being torch.float16 / torch.bfloat16 / torch.float32)
#   runtime/zero/stage_1_and_2.py __init__ (rank 0): logger.info(f"Reduce bucket size {reduce_bucket_size}")
#   runtime/zero/stage3.py __init__: see_memory_usage("Stage 3 initialize beginning", force=True)
#   both stages: see_memory_usage("Before initializing optimizer states" / "Before creating fp16|fp32 partitions")
#   zero/parameter_offload.py (0.6-0.16): see_memory_usage("DeepSpeedZeRoOffload initialize [begin]");
#   bf16_optimizer.py (0.6-0.16): see_memory_usage('begin bf16_optimizer' / f'before initializing group {i}')
_SETUP_BEGINS = _lazy(r"Creating (?:fp16|bf16|fp32|torch\.\w+) ZeRO stage (?P<stage>[0-3]) optimizer|"
                      r"\bReduce bucket size \d+|Stage 3 initialize beginning|"
                      r"Before initializing optimizer states|Before creating fp(?:16|32) partitions|"
                      r"DeepSpeedZeRoOffload initialize \[begin\]|\bbegin bf16_optimizer|before initializing group \d+")
# ... and the ones that say it got through: see_memory_usage("After initializing ZeRO optimizer"),
# logger.info("optimizer state initialized") (stage_1_and_2.py), log_dist("DeepSpeed Final Optimizer = {}")
# (engine.py _configure_optimizer), log_dist("DeepSpeed LR Scheduler = {}") and "DeepSpeedEngine configuration:"
# (engine.py, printed once the optimizer is built), transformers' Trainer "***** Running training *****" (trainer.py,
# printed after deepspeed_init), anything a training step prints, and a frame of the step itself (a traceback through
# the engine's step, backward or forward was raised after set-up).
_SETUP_ENDS = _lazy(r"After initializing ZeRO optimizer|optimizer state initialized|DeepSpeed Final Optimizer = |"
                    r"\bend bf16_ ?optimizer|"
                    r"DeepSpeed LR Scheduler = |DeepSpeedEngine configuration|"
                    r"\*\*\*\*\* Running training \*\*\*\*\*|"
                    r"[{ ,]'loss': |\d ?(?:it/s|s/it)\]|\bsteps?[=: ]+\d+\b.*\bloss\b|\[deepspeed\] OVERFLOW!|"
                    r", in (?:step|_take_model_step|backward|forward|train_batch|training_step\w*)\b")
# torch's allocator message (c10/cuda/CUDACachingAllocator.cpp) and its exception class, on the line itself
_OOM = _lazy(r"CUDA out of memory|OutOfMemoryError|HIP out of memory|CUDA error: out of memory")
_FRAMEISH = _lazy(r"""\.py["']?(?:, line |:)\d+|\.py\(\d+\)""")
# a run that trains under ZeRO: the DeepSpeed launcher's or a trainer's --deepspeed flag with a config, the config's
# own keys, Lightning's strategy names, DeepSpeed's INFO lines naming a stage
_ZERO_RUN = _lazy(r"--deepspeed[= ]+\S+\.json|\"zero_optimization\"|'zero_optimization'|\bzero_stage[\"' =:]+[1-3]\b|"
                  r"deepspeed_stage_[1-3]|ZeRO stage [1-3]\b|--zero[_-]stage[= ]+[1-3]\b|zero3_init_flag|"
                  r"\"stage\":\s*[1-3]\b")
# the line a Python traceback ends with: the exception's type, optionally its message
_RAISED = _lazy(r"^[A-Za-z_][\w.]*(?::|$)")
_EXCEPTION = _lazy(r"[\w.]*(?:Error|Exception|Interrupt)\b")
INTERLEAVED = 30  # lines of other ranks' output that may separate a traceback's frames from its exception
_PREFIX = _lazy(r"^(?:\[(?:rank|RANK|Rank) ?\d+\]:|\[default\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d+: )\s?")
# progress bars that are not training steps: loading weights, downloading, tokenising a data set (tqdm's description)
_NOT_A_STEP = _lazy(r"\b(?:Loading|Downloading|Fetching|Map|Filter|Tokeniz\w*|Running tokenizer|Converting|Generating|"
                    r"Preprocess\w*|Saving)\b")
# any sign of a traceback (DeepSpeed's own "[runner.py:568:main]" log prefix is not one)
_TRACE = _lazy(r"""Traceback \(most recent call last\)|File "[^"]*", line \d+|\.py:\d+,? in [\w<]""")
_HEADER = "Traceback (most recent call last)"


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


def setup_traceback_cut_short(text: str, file: str) -> tuple[Evidence, Evidence] | None:
    """(the innermost frame, the traceback's header) when a traceback stops, with no exception line, inside the code
    that allocates ZeRO's optimizer state: what is raised there is the allocation failing. A traceback that goes on
    to name its exception is left to the rules that read the exception."""
    lines = [_PREFIX.sub("", x) for x in text.splitlines()]
    n = 0
    while n < len(lines):
        if _HEADER not in lines[n]:
            n += 1
            continue
        header, last, n = n, None, n + 1
        while n < len(lines) and (lines[n].startswith((" ", "\t")) or not lines[n].strip()):
            if _FRAMEISH.search(lines[n]):
                last = n
            n += 1
        if n < len(lines) and _RAISED.match(lines[n]):
            continue
        if any(_EXCEPTION.match(x.lstrip()) for x in lines[n:n + INTERLEAVED]):
            continue  # another process's lines came between the frames and their exception
        if last is not None and SETUP_FRAME.search(lines[last]) and \
                _ALLOCATING.search(lines[last] + " " + (lines[last + 1] if last + 1 < len(lines) else "")):
            return (Evidence(file, last + 1, text.splitlines()[last], "rule:zero-setup-traceback-cut"),
                    Evidence(file, header + 1, "the traceback ends in ZeRO's optimizer-state set-up without naming "
                                               "its exception", "because"))
    return None


def oom_before_training_under_zero(text: str, file: str) -> tuple[Evidence, Evidence] | None:
    """(the OOM line, the line that shows ZeRO) when a run configured for ZeRO prints a CUDA OOM with no frame at all
    and nothing before it says training had begun: the state the stage leaves on each GPU did not fit."""
    if _TRACE.search(text):  # where it was raised shows: the frame rules read it
        return None
    zero: tuple[int, str] | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if _SETUP_ENDS.search(line) and not _NOT_A_STEP.search(line):
            return None
        if zero is None and _ZERO_RUN.search(line):
            zero = (n, line)
        elif zero is not None and _OOM.search(line):
            return (Evidence(file, n, line, "rule:oom-before-training-under-zero"),
                    Evidence(file, zero[0], f"the run trains under ZeRO and had not begun a step: "
                                            f"{zero[1].strip()[:200]}", "because"))
    return None
