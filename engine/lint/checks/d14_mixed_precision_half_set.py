"""D14: FSDP's MixedPrecision (or FSDP2's MixedPrecisionPolicy) with a 16-bit param_dtype and no reduce_dtype."""
from __future__ import annotations

import ast
import re

from gpudoctor.engine.lint.model import Check, Hit

POLICIES = ("MixedPrecision", "MixedPrecisionPolicy")
# a 16-bit dtype as scripts spell it: torch.bfloat16, torch.float16, torch.half, or a name that says so (bf16_dtype)
LOW_PRECISION = re.compile(r"bfloat16|float16|\bhalf\b|bf16|fp16", re.IGNORECASE)


def half_set(call: ast.Call) -> str | None:
    """The 16-bit param dtype as written, when the policy leaves reduce_dtype to follow it; else None."""
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords or "reduce_dtype" in keywords or len(call.args) >= 2:
        return None  # **kwargs (cannot tell), or the reduction's dtype is chosen
    param = keywords.get("param_dtype", call.args[0] if call.args else None)
    if param is None:
        return None
    text = ast.unparse(param)
    return text if LOW_PRECISION.search(text) else None


class MixedPrecisionHalfSet(Check):
    code = "D14"
    slug = "mixed-precision-half-set"
    severity = "warning"
    summary = "FSDP MixedPrecision with a 16-bit param_dtype and no reduce_dtype: gradients are summed in 16 bits"

    def find(self, script):
        if not script.uses("FSDP", "FullyShardedDataParallel", "fully_shard") and "fsdp" not in script.text.lower():
            return
        for site in script.calls:
            if site.attr not in POLICIES or (site.name and "fsdp" not in site.name and "." in site.name):
                continue
            dtype = half_set(site.node)
            if dtype is not None:
                yield Hit(site.line, site.node.col_offset,
                          f"{site.attr}(param_dtype={dtype}) without reduce_dtype: FSDP then reduce-scatters the "
                          "gradients in that 16-bit dtype too, summing many ranks' gradients with a short mantissa; "
                          "add reduce_dtype=torch.float32")
