"""Which user functions and source lines say that only rank 0 is meant to run the code (save, eval, log metrics)."""
from __future__ import annotations

import re

from gpudoctor.engine.lazyregex import LazyRegex as _lazy

# user functions whose name says "only one rank is meant to be here": saving, evaluating, logging metrics,
# exporting; whole words of a snake_case or camelCase name, so logits, catalog, latest or printer do not count
_GATED_WORDS = (r"save|saving|saver|checkpoint|checkpointing|ckpt|eval|evaluate|evaluation|evaluator|validate|"
                r"validation|valid|val|export|upload|push|wandb|tensorboard|rank0|rank_zero|main_process")
_GATED_FUNCTION = _lazy(
    r"(?:^|_)(?:" + _GATED_WORDS + r")(?:$|_)|^(?:log|write|report)_(?:metrics?|scalars?|stats|summary|results?|"
    r"images?|samples?)$|^on_(?:save|validation|evaluate)\w*$", re.IGNORECASE)
# a source line that branches on being rank 0
_RANK0_BRANCH = _lazy(r"rank(?:\(\))?\s*==\s*0|0\s*==\s*\w*rank|is_main_process|is_global_zero|is_local_main_process|"
                           r"is_world_process_zero|is_local_process_zero|local_rank\s+in\s+[\[(]-1,\s*0|rank\s*<=?\s*0|"
                           r"not\s+\w*rank\b|is_master|is_rank_?0|rank_zero_only|main_process_only|master_only")


# the wrapper a rank-zero-only decorator puts around a function: its body runs on rank 0 alone, so a collective
# reached through it is one the other ranks never call. Lightning's `rank_zero_only` names it wrapped_fn in
# lightning_utilities/core/rank_zero.py, lightning/fabric/utilities/rank_zero.py (2.x),
# pytorch_lightning/utilities/rank_zero.py (1.6-1.9) and pytorch_lightning/utilities/distributed.py (1.0-1.5)
_RANK_ZERO_WRAPPER_FILE = _lazy(r"(?:^|[/\\])(?:rank_zero\.py|pytorch_lightning[/\\]utilities[/\\]distributed\.py)$")


def is_rank_zero_wrapper(file: str | None, function: str | None) -> bool:
    """Whether a frame is a rank-zero-only decorator's wrapper (Lightning's wrapped_fn)."""
    return function == "wrapped_fn" and bool(file) and bool(_RANK_ZERO_WRAPPER_FILE.search(file.strip()))


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def is_gated_function(name: str | None) -> bool:
    """Whether a function's name says only one rank should run it (save_checkpoint, evaluate, log_metrics)."""
    return bool(name) and bool(_GATED_FUNCTION.search(_snake(name.strip("_"))))


def is_rank0_branch(source: str | None) -> bool:
    """Whether a source line guards what follows with a rank-0 test."""
    return bool(source) and bool(_RANK0_BRANCH.search(source))
