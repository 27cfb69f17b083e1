"""Model-loading patches: D28, every rank building a full float32 copy of the model in host RAM while it loads."""
from __future__ import annotations

import re

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable

# the classes whose from_pretrained loads model weights (AutoModelForCausalLM, LlamaForCausalLM, BertModel, T5Model);
# tokenizers, configs, processors and PEFT adapters load no full model
_MODEL_CLASS = re.compile(r"(?:^|\.)(?:Auto\w*Model\w*|\w+For[A-Z]\w*|\w*[a-z0-9]Model)$")
_NOT_A_MODEL = re.compile(r"Tokenizer|Config|Processor|FeatureExtractor|Peft", re.IGNORECASE)
# transformers 4.51 dropped the flag (from_pretrained pops and ignores it): every load is the low-memory one
LOADS_LOW_FROM = (4, 51)


def installed_transformers() -> tuple[int, ...] | None:
    """The version of transformers installed beside gpudoctor (read from its metadata, never imported), if any."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = re.match(r"(\d+)\.(\d+)", version("transformers"))
    except (PackageNotFoundError, ValueError):
        return None
    return (int(found.group(1)), int(found.group(2))) if found else None


def low_cpu_mem_usage(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """D28: `low_cpu_mem_usage=True` on each model's from_pretrained that sets neither it nor device_map (which
    implies it): the weights are read straight into the model instead of into a second, randomly initialised copy."""
    module = h.parse(text, path)
    changed, float32 = [], []

    def fix(call):
        name = h.call_name(call)
        if h.last(name) != "from_pretrained" or "." not in name:
            return None
        owner = name.rsplit(".", 1)[0]
        if not _MODEL_CLASS.search(owner) or _NOT_A_MODEL.search(owner):
            return None
        if h.kwarg(call, "low_cpu_mem_usage") is not None or h.kwarg(call, "device_map") is not None:
            return None
        changed.append(owner)
        if h.kwarg(call, "torch_dtype") is None and h.kwarg(call, "dtype") is None:
            float32.append(owner)
        return h.add_kwarg(call, "low_cpu_mem_usage", cst.Name("True"))

    module = h.replace_calls(module, fix)
    if not changed:
        raise NotApplicable(f"{path}: no model from_pretrained(...) without low_cpu_mem_usage or device_map")
    notes = [f"{', '.join(dict.fromkeys(changed))}: loaded without first building a full copy in host RAM; with N "
             "ranks per node that copy was made N times at once"]
    if float32:
        notes.append(f"{', '.join(dict.fromkeys(float32))} still loads in float32: torch_dtype=torch.bfloat16 (the "
                     "training dtype) halves what each rank holds")
    installed = installed_transformers()
    if installed is not None and installed >= LOADS_LOW_FROM:
        notes.append(f"the transformers installed here ({installed[0]}.{installed[1]}) ignores the flag: from 4.51 "
                     "every load is the low-memory one, so on this version the peak comes from elsewhere (the dtype, "
                     "or each rank loading at once); the flag matters where the job runs transformers 4.50 or older")
    return module.code, notes
