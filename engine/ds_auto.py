"""A DeepSpeed config value that a trainer filled in from "auto" and DeepSpeed then rejected: a version mismatch
between the two libraries, not a setting the user got wrong, so it rules out D17."""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.rules import Verdict
from gpudoctor.engine.textfind import line_at

# transformers (integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_finalize, up to 4.44) fills
# "auto" in zero_optimization.stage3_prefetch_bucket_size with `0.9 * hidden_size * hidden_size`, a float; 4.45 wraps
# it in int(). DeepSpeed 0.15's pydantic-v2 config models no longer coerce it, and pydantic-core prints
#   'Input should be a valid integer, got a number with a fractional part [type=int_from_float, input_value=...'
# under the field's name (src/errors/types.rs, ErrorType::IntFromFloat).
_REJECTED = ("got a number with a fractional part", "type=int_from_float")  # str.find: no regex over a whole log
_FIELD = "stage3_prefetch_bucket_size"
LOOK_BACK = 400  # characters before the rejection where pydantic names the field
NOTE = ("stage3_prefetch_bucket_size: DeepSpeed 0.15+ rejects the float that transformers before 4.45 fills in for "
        '"auto". Upgrade transformers (or pin DeepSpeed 0.14), or give the key an integer in the config.')


def auto_float_rule(text: str, file: str) -> list[Verdict]:
    """D17 ruled out where the value DeepSpeed rejected is the ZeRO-3 prefetch bucket a trainer filled in."""
    found = [at for at in (text.find(words) for words in _REJECTED) if at >= 0]
    if not found:
        return []
    hit = min(found)
    at = text.rfind(_FIELD, max(0, hit - LOOK_BACK), hit)
    if at < 0:
        return []
    line_no, line = line_at(text, hit)
    evidence = Evidence(file, line_no, line, "rule:auto-float-rejected")
    return [Verdict("D17", "rule:auto-float-rejected", (evidence,), rule_out=True, note=NOTE)]
