"""A ZeRO-3 value that transformers filled in from "auto" and DeepSpeed 0.15+ rejected is a version mismatch between
the two libraries, not the user's config (D17 ruled out, with a note that says what to do)."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import Source
from gpudoctor.kb.catalog import load_catalog

CATALOG = load_catalog(use_cache=False)
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"

# pydantic-core's int_from_float error under the field's name, as DeepSpeed 0.15 raises it (rendered)
REJECTED = """[rank0]:   File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/zero/config.py", line 23, in get_zero_config
[rank0]:     return DeepSpeedZeroConfig(**param_dict)
[rank0]: pydantic_core._pydantic_core.ValidationError: 1 validation error for DeepSpeedZeroConfig
[rank0]: stage3_prefetch_bucket_size
[rank0]:   Input should be a valid integer, got a number with a fractional part [type=int_from_float, input_value=3774873.6, input_type=float]
"""
# the same exception for a key the user misspelled: that is D17's own case
MISSPELLED = """[rank0]: pydantic_core._pydantic_core.ValidationError: 1 validation error for DeepSpeedZeroConfig
[rank0]: stage3_prefetch_bucket
[rank0]:   Extra inputs are not permitted [type=extra_forbidden, input_value=500000000, input_type=int]
"""


def run(text: str):
    return diagnose(CATALOG, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))


def test_an_auto_value_deepspeed_rejects_is_not_a_config_the_user_got_wrong():
    d = run(REJECTED)
    assert "D17" not in [f.id for f in d.findings]
    assert any("transformers" in n and "4.45" in n for n in d.notes)


def test_a_misspelled_key_in_the_same_exception_is_still_d17():
    d = run(MISSPELLED)
    assert [f.id for f in d.findings if f.tier == "match"][:1] == ["D17"]
    assert not any("4.45" in n for n in d.notes)


def test_the_field_must_be_named_before_the_rejection():
    far = REJECTED.replace("[rank0]: stage3_prefetch_bucket_size\n", "") + "stage3_prefetch_bucket_size: 3774873.6\n"
    d = run(far)
    assert "D17" in [f.id for f in d.findings if f.tier == "match"]


def test_the_cli_prints_the_note_on_a_real_log():
    path = LOGS / "negative" / "llamafactory-5252-ds015-zero3-prefetch-bucket-float-rejected.log"
    r = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", str(path)], capture_output=True, text=True,
                       env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "80"}, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "D17" not in r.stdout and "Upgrade transformers" in r.stdout
