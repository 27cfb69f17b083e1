"""D13's settings: the FSDP sharding strategies, what each keeps resident, and the Accelerate config edit that picks
one (the script patch is engine/fixes/patches/sharding.py; both read the strategy from --param sharding_strategy)."""
from __future__ import annotations

import re

from gpudoctor.engine.fixes.errors import FixError, NotApplicable

# torch.distributed.fsdp.ShardingStrategy's members (torch 1.12-2.x)
STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2", "NO_SHARD")
DEFAULT = "HYBRID_SHARD"
# what each strategy means under FSDP2's fully_shard, which has no strategy argument: reshard_after_forward
RESHARD = {"FULL_SHARD": "True", "SHARD_GRAD_OP": "False"}
# the HF Trainer's `fsdp=` words (transformers 4.2x-4.5x, FSDPOption): one strategy word among the options
TRAINER_WORDS = {"full_shard": "FULL_SHARD", "shard_grad_op": "SHARD_GRAD_OP", "hybrid_shard": "HYBRID_SHARD",
                 "hybrid_shard_zero2": "_HYBRID_SHARD_ZERO2", "no_shard": "NO_SHARD"}
WHAT = {
    "FULL_SHARD": "parameters, gradients and optimizer state sharded over every rank: the least memory, parameters "
                  "gathered in forward and again in backward",
    "SHARD_GRAD_OP": "parameters kept whole from forward to backward: fewer gathers, a higher peak (it can run out "
                     "of memory where FULL_SHARD fit)",
    "HYBRID_SHARD": "sharded inside each node, replicated across nodes: only the gradient reduction crosses between "
                    "nodes, and each GPU holds a node's share of the model instead of the job's",
    "_HYBRID_SHARD_ZERO2": "SHARD_GRAD_OP inside each node, replicated across nodes",
    "NO_SHARD": "a full replica on every rank, as DDP keeps",
}


def strategy_of(facts: dict, path: str) -> str:
    """The strategy asked for (--param sharding_strategy, any case, with or without `ShardingStrategy.`)."""
    raw = str(facts.get("sharding_strategy") or DEFAULT).strip()
    name = raw.rsplit(".", 1)[-1].upper()
    name = TRAINER_WORDS.get(name.lower(), name)
    if name not in STRATEGIES:
        raise NotApplicable(f"{path}: sharding_strategy must be one of {', '.join(STRATEGIES)} (got {raw!r})")
    return name


_ACC_BLOCK = re.compile(r"^fsdp_config:[ \t]*(?:#[^\n]*)?\n(?P<body>(?:(?:[ \t]+[^\n]*|[ \t]*)\n)*)", re.M)
# accelerate's numbering when the config holds a number (accelerate 0.1x-0.2x wrote 1-5; later ones write names)
NUMBERS = {"FULL_SHARD": 1, "SHARD_GRAD_OP": 2, "NO_SHARD": 3, "HYBRID_SHARD": 4, "_HYBRID_SHARD_ZERO2": 5}


def accelerate_fsdp_strategy(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """An Accelerate config's `fsdp_config: fsdp_sharding_strategy:` set to the strategy asked for, in the file's
    own form (a name, or the number older accelerate versions wrote), its comment kept; added to the block when
    missing. FSDP2 configs (fsdp_version: 2) are sized by a device mesh instead and left alone for hybrid."""
    import yaml

    name = strategy_of(facts, path)
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise FixError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    block = data.get("fsdp_config") if isinstance(data, dict) else None
    if not isinstance(block, dict):
        raise NotApplicable(f"{path}: no fsdp_config section (this Accelerate config does not use FSDP)")
    comment = ""
    if str(block.get("fsdp_version", "1")) == "2":
        key, value = "fsdp_reshard_after_forward", RESHARD.get(name, "").lower()
        if not value:
            raise NotApplicable(f"{path}: an FSDP2 config has no {name}; a hybrid layout is set by "
                                "parallelism_config's dp_replicate_size and dp_shard_size")
    elif "fsdp_sharding_strategy" in block:  # accelerate 0.1x-0.3x: a number (0.2x) or a name
        key, old = "fsdp_sharding_strategy", block["fsdp_sharding_strategy"]
        value = str(NUMBERS[name]) if isinstance(old, int) or str(old).isdigit() else name
    elif isinstance(block.get("fsdp_reshard_after_forward"), str):  # accelerate 1.x writes FSDP1's strategy here
        key, value = "fsdp_reshard_after_forward", name
    else:  # no strategy yet (FULL_SHARD): the number, which every accelerate version reads
        key, value, comment = "fsdp_sharding_strategy", str(NUMBERS[name]), f"  # {name}"
    line = re.compile(rf"^([ \t]+){key}:([ \t]*)([^#\n]*?)([ \t]*#[^\n]*)?$", re.M)
    found = line.search(text)
    if found is not None:
        if found.group(3).strip().strip("'\"").upper() == value.upper():
            raise NotApplicable(f"{path}: {key} is already {value}")
        out = (text[:found.start()] + f"{found.group(1)}{key}:{found.group(2) or ' '}{value}{found.group(4) or ''}"
               + text[found.end():])
    else:
        head = _ACC_BLOCK.search(text)
        if head is None:
            raise NotApplicable(f"{path}: fsdp_config is not a block gpudoctor can edit line by line")
        indent = re.match(r"[ \t]+", head.group("body")) if head.group("body") else None
        pad = indent.group(0) if indent else "  "
        at = head.start("body")
        out = text[:at] + f"{pad}{key}: {value}{comment}\n" + text[at:]
    try:
        again = yaml.safe_load(out)
    except yaml.YAMLError:
        raise FixError(f"internal: editing {path} broke its YAML") from None
    if str(again["fsdp_config"][key]).lower() != value.lower():
        raise FixError(f"internal: editing {path} did not set fsdp_config.{key}")
    return out, [f"fsdp_config.{key}: {value} ({WHAT[name]})"]
