"""D28's loading patch: low_cpu_mem_usage=True on the from_pretrained calls that build a full model, nowhere else."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.loading import low_cpu_mem_usage


def test_d28_low_cpu_mem_usage_only_on_models_that_build_a_full_copy():
    source = "\n".join([
        "from transformers import AutoModel, AutoTokenizer, AutoConfig, BertForSequenceClassification",
        "from peft import PeftModel",
        "tok = AutoTokenizer.from_pretrained('x')",
        "cfg = AutoConfig.from_pretrained('x')",
        "a = AutoModel.from_pretrained('x', device_map='auto')",
        "b = BertForSequenceClassification.from_pretrained('bert', torch_dtype=torch.float16)",
        "c = PeftModel.from_pretrained(b, 'adapter')",
        "d = model_cls.from_pretrained('y')",
        "e = transformers.LlamaForCausalLM.from_pretrained('z', low_cpu_mem_usage=False)",
    ]) + "\n"
    new, notes = low_cpu_mem_usage(source, "train.py", {})
    changed = [line for old, line in zip(source.splitlines(), new.splitlines()) if old != line]
    assert changed == ["b = BertForSequenceClassification.from_pretrained('bert', torch_dtype=torch.float16, "
                       "low_cpu_mem_usage=True)"]
    assert len(notes) == 1  # the dtype was given: no float32 note
    with pytest.raises(NotApplicable):  # an explicit choice is left alone, even False
        low_cpu_mem_usage(source.replace("torch_dtype=torch.float16", "low_cpu_mem_usage=False"), "train.py", {})


@pytest.mark.parametrize("installed, told", [((4, 51), True), ((4, 57), True), ((4, 50), False), (None, False)])
def test_the_note_says_when_the_installed_transformers_ignores_the_flag(monkeypatch, installed, told):
    from gpudoctor.engine.fixes.patches import loading

    monkeypatch.setattr(loading, "installed_transformers", lambda: installed)
    _, notes = low_cpu_mem_usage("m = AutoModelForCausalLM.from_pretrained('x')\n", "train.py", {})
    assert any("ignores the flag" in n for n in notes) is told


def test_the_installed_version_is_read_from_metadata(monkeypatch):
    import importlib.metadata

    from gpudoctor.engine.fixes.patches.loading import installed_transformers

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "4.57.1" if name == "transformers" else "0")
    assert installed_transformers() == (4, 57)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "4.46.0.dev0")
    assert installed_transformers() == (4, 46)
