"""D14's patch: a 16-bit FSDP mixed-precision policy without reduce_dtype gains reduce_dtype=torch.float32."""
from __future__ import annotations

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches.fsdp import fsdp_reduce_dtype

HEAD = "import torch\nfrom torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy\n"


@pytest.mark.parametrize("call, expected", [
    ("MixedPrecision(param_dtype=torch.bfloat16)", "MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)"),
    ("MixedPrecisionPolicy(torch.float16)", "MixedPrecisionPolicy(torch.float16, reduce_dtype=torch.float32)"),
    ("MixedPrecision(\n    param_dtype=torch.half,\n    buffer_dtype=torch.half,\n)",
     "MixedPrecision(\n    param_dtype=torch.half,\n    buffer_dtype=torch.half,\n    reduce_dtype=torch.float32,\n)"),
    ("MixedPrecision(param_dtype=bf16_dtype, cast_forward_inputs=True)",
     "MixedPrecision(param_dtype=bf16_dtype, cast_forward_inputs=True, reduce_dtype=torch.float32)"),
])
def test_the_reduction_moves_to_float32(call, expected):
    new, notes = fsdp_reduce_dtype(HEAD + f"mp = {call}\n", "train.py", {})
    assert new == HEAD + f"mp = {expected}\n"
    assert "float32" in notes[0]


def test_torch_is_imported_when_the_script_had_only_the_fsdp_names():
    new, _ = fsdp_reduce_dtype("from torch.distributed.fsdp import MixedPrecision\nmp = MixedPrecision(param_dtype=bf16)\n",
                               "t.py", {})
    assert new.splitlines()[:2] == ["from torch.distributed.fsdp import MixedPrecision", "import torch"]


@pytest.mark.parametrize("call", [
    "MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)",  # chosen on purpose
    "MixedPrecision(torch.bfloat16, torch.float32)",
    "MixedPrecision(param_dtype=torch.float32)",
    "MixedPrecision(param_dtype=dtype)",  # cannot tell
    "MixedPrecision(**cfg)",
    "MixedPrecision(buffer_dtype=torch.bfloat16)",  # params in full precision
])
def test_left_alone(call):
    with pytest.raises(NotApplicable, match="no FSDP mixed-precision policy"):
        fsdp_reduce_dtype(HEAD + f"mp = {call}\n", "train.py", {})
