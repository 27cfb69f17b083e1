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
    return module.code, notes
