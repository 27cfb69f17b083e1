"""D16's config fix: the ZeRO stage raised, and CPU offload added at stage 3, in place in the DeepSpeed JSON.

The entry's ladder: stage 2 for a model that nearly fits, stage 3 when the weights alone are too big, CPU offload
only after stage 3 has failed. The target is a fact (`--param zero_stage=2`, `--param offload=cpu`; stage 3 and no
offload unless given), not a step from wherever the file stands, so that planning again after the fix finds nothing
left to do. The file's layout is kept: only the stage's value changes, or keys are added in its own indentation.
"""
from __future__ import annotations

import json
import re

from gpudoctor.engine.fixes.config import _add_key, _checked_json, _load_json, _top_level_values, string_end
from gpudoctor.engine.fixes.errors import NotApplicable

OFFLOAD = {"offload_optimizer": '{"device": "cpu", "pin_memory": true}',
           "offload_param": '{"device": "cpu", "pin_memory": true}'}


def _object_of(text: str, key: str) -> tuple[int, int] | None:
    """(start, end) of the object that is a top-level key's value, its braces included."""
    depth, i, n = 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = string_end(text, i)
            if depth == 1 and json.loads(text[i:j]) == key:
                k = j
                while text[k] in " \t\r\n:":
                    k += 1
                return (k, _closing(text, k)) if text[k] == "{" else None
            i = j
            continue
        depth += ch in "{["
        depth -= ch in "}]"
        i += 1
    return None


def _closing(text: str, start: int) -> int:
    """The index after the brace that closes the object opening at text[start]."""
    depth, i = 0, start
    while True:
        ch = text[i]
        if ch == '"':
            i = string_end(text, i)
            continue
        depth += ch in "{["
        depth -= ch in "}]"
        i += 1
        if depth == 0:
            return i


def _add_inner_key(obj: str, key: str, value: str) -> str:
    """A key added last in a nested object, in its keys' indentation, the closing brace left where it was."""
    end = obj.rstrip().rfind("}")
    body = obj[:end].rstrip()
    before_brace = obj[len(body):end]
    sep = "," if not body.endswith("{") else ""
    if "\n" not in before_brace:  # an object on one line: {"stage": 3}
        return f"{body}{sep} {json.dumps(key)}: {value}{before_brace}{obj[end:]}"
    pad = re.search(r"\n([ \t]+)\"", obj)
    return f"{body}{sep}\n{pad.group(1) if pad else '  '}{json.dumps(key)}: {value}{before_brace}{obj[end:]}"


def ds_zero_stage(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """zero_optimization.stage raised to `zero_stage` (3 unless given); with `offload=cpu` at stage 3, the optimizer
    states and the weights offloaded to CPU. A stage already as high, or offload already set, is left alone."""
    data = _load_json(text, path)
    target = int(facts.get("zero_stage") or 3)
    offload = str(facts.get("offload") or "none").lower()
    if target not in (1, 2, 3) or offload not in ("none", "cpu"):
        raise NotApplicable(f"{path}: zero_stage must be 1, 2 or 3 and offload none or cpu")
    zero = data.get("zero_optimization")
    if zero is None:
        value = f'{{"stage": {target}' + "".join(f", {json.dumps(k)}: {v}" for k, v in OFFLOAD.items()
                                                 if offload == "cpu" and target == 3) + "}"
        return _checked_json(_add_key(text, "zero_optimization", value), path), [_STAGE_NOTES[target]]
    stage = zero.get("stage", 0) if isinstance(zero, dict) else None
    if not isinstance(stage, int) or isinstance(stage, bool):
        raise NotApplicable(f"{path}: zero_optimization.stage is not a number gpudoctor can raise")
    start, end = _object_of(text, "zero_optimization")
    inner, notes = text[start:end], []
    if stage < target:
        spans = _top_level_values(inner)
        if "stage" in spans:
            _, v_start, v_end, _ = spans["stage"]
            inner = inner[:v_start] + str(target) + inner[v_end:]
        else:
            inner = _add_inner_key(inner, "stage", str(target))
        notes.append(f"ZeRO stage {stage} -> {target}: {_STAGE_NOTES[target]}")
    if offload == "cpu" and max(stage, target) == 3:
        for key, value in OFFLOAD.items():
            if key not in zero:
                inner = _add_inner_key(inner, key, value)
        if any(key not in zero for key in OFFLOAD):
            notes.append("the optimizer states and the weights now live in CPU memory: slower steps, and every "
                         "rank's share must fit in host RAM (D28)")
    if inner == text[start:end]:
        raise NotApplicable(f"{path}: already ZeRO stage {stage}" + (
            "; the next steps are --param offload=cpu, a smaller micro batch or more GPUs" if offload == "none" else
            ": its offload sections are set already (as cpu, nvme or none)"))
    return _checked_json(text[:start] + inner + text[end:], path), notes


_STAGE_NOTES = {1: "optimizer states are sharded across ranks",
                2: "gradients and optimizer states are sharded across ranks",
                3: "the weights are sharded too, gathered layer by layer (more communication per step)"}
