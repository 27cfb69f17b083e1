"""D13's patch: the FSDP sharding strategy a script asks for, set to the one the user picks (--param
sharding_strategy), hybrid by default: the log-visible form of D13 is a multi-node job whose every parameter gather
crosses the slow link between nodes."""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.fsdp_config import RESHARD, TRAINER_WORDS, WHAT, strategy_of
from gpudoctor.engine.lint.checks.d12_fsdp_without_wrap_policy import FSDP1


def _trainer_fsdp(call: cst.Call, name: str, changed: list[str]):
    """`TrainingArguments(fsdp="full_shard auto_wrap")` with the strategy word replaced (or added)."""
    arg = h.kwarg(call, "fsdp")
    if arg is None or not isinstance(arg.value, cst.SimpleString):
        return None
    quote = arg.value.quote
    words = arg.value.evaluated_value.split()
    if not words:
        return None
    want = next(w for w, s in TRAINER_WORDS.items() if s == name)
    kept = [w for w in words if w not in TRAINER_WORDS]
    new = [want] + kept
    if new == words or (set(words) & set(TRAINER_WORDS)) == {want}:
        return None
    changed.append(f'fsdp="{" ".join(new)}"')
    value = cst.SimpleString(f"{arg.value.prefix}{quote}{' '.join(new)}{quote}")
    return call.with_changes(args=[a.with_changes(value=value) if a is arg else a for a in call.args])


def fsdp_sharding_strategy(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """Every FSDP1 constructor gains (or changes to) `sharding_strategy=ShardingStrategy.<X>`; FSDP2's fully_shard
    calls get the reshard_after_forward that means the same (FULL_SHARD or SHARD_GRAD_OP only: a hybrid layout under
    FSDP2 is a 2-D device mesh, which a patch cannot size); an HF Trainer's `fsdp="..."` gets the strategy word."""
    name = strategy_of(facts, path)
    module = h.parse(text, path)
    changed: list[str] = []
    refused: list[str] = []
    wanted = h.expr(f"ShardingStrategy.{name}")

    def fix(call: cst.Call):
        callee = h.last(h.call_name(call))
        if callee in FSDP1:
            if any(a.star for a in call.args) and h.kwarg(call, "sharding_strategy") is None:
                refused.append(f"{callee}(**...)")
                return None
            arg = h.kwarg(call, "sharding_strategy")
            if arg is None:
                changed.append(f"{callee}(...)")
                return h.add_kwarg(call, "sharding_strategy", wanted)
            if h.code(arg.value).rsplit(".", 1)[-1] == name:
                return None
            changed.append(f"{callee}(..., sharding_strategy={h.code(arg.value)})")
            return call.with_changes(args=[a.with_changes(value=wanted) if a is arg else a for a in call.args])
        if callee == "fully_shard":
            if name not in RESHARD:
                refused.append("fully_shard(...)")
                return None
            arg = h.kwarg(call, "reshard_after_forward")
            value = cst.Name(RESHARD[name])
            if arg is None:
                changed.append("fully_shard(...)")
                return h.add_kwarg(call, "reshard_after_forward", value)
            if h.code(arg.value) == RESHARD[name]:
                return None
            changed.append(f"fully_shard(..., reshard_after_forward={h.code(arg.value)})")
            return call.with_changes(args=[a.with_changes(value=value) if a is arg else a for a in call.args])
        if callee.endswith("TrainingArguments"):  # TrainingArguments, Seq2SeqTrainingArguments
            return _trainer_fsdp(call, name, changed)
        return None

    module = h.replace_calls(module, fix)
    if not changed:
        if refused and name not in RESHARD and "fully_shard(...)" in refused:
            raise NotApplicable(f"{path}: FSDP2's fully_shard has no {name}: a hybrid layout is a 2-D device mesh "
                                "(init_device_mesh with a replicate and a shard dimension) passed as mesh=; "
                                "--param sharding_strategy=FULL_SHARD or SHARD_GRAD_OP set reshard_after_forward")
        if refused:
            raise NotApplicable(f"{path}: the FSDP arguments come from **kwargs: set sharding_strategy where they "
                                "are built")
        raise NotApplicable(f"{path}: no FSDP(...), fully_shard(...) or TrainingArguments(fsdp=...) whose strategy "
                            f"is not already {name}")
    if any(c.startswith(FSDP1) for c in changed):
        module = h.add_from_import(module, "torch.distributed.fsdp", "ShardingStrategy")
    notes = [f"{', '.join(dict.fromkeys(changed))}: {name}, {WHAT[name]}"]
    if name in ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"):
        notes.append("FSDP groups a node's ranks by the GPUs the node has (torch.cuda.device_count()): run one "
                     "process per GPU on every node, or pass device_mesh= (2-D: replicate, shard) to FSDP")
    if refused:
        notes.append(f"left as they were: {', '.join(dict.fromkeys(refused))}")
    return module.code, notes
