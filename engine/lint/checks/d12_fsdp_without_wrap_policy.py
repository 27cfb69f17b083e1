"""D12: FSDP1 wraps only the root module (no auto_wrap_policy and no other FSDP unit in the script).

FSDP2's fully_shard is not checked: a single call site is as often a helper applied to every block (recursively or
from a caller's loop) as a root-only wrap, which the call alone cannot tell (seen in composer's fsdp2.py)."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

FSDP1 = ("FullyShardedDataParallel", "FSDP")
# ways a script splits the model into units by hand, which need no policy
MANUAL = ("enable_wrap", "wrap", "ModuleWrapPolicy", "lambda_auto_wrap_policy")


def root_only(call: ast.Call) -> bool:
    """An FSDP1 constructor with no auto_wrap_policy (nor **kwargs that might hold one)."""
    keywords = {k.arg for k in call.keywords}
    return None not in keywords and "auto_wrap_policy" not in keywords and "policy" not in keywords


class FSDPWithoutWrapPolicy(Check):
    code = "D12"
    slug = "fsdp-root-only"
    severity = "warning"
    summary = "FSDP around the root module only: one unit, so every step gathers the whole model (memory near DDP's)"

    def find(self, script):
        if script.uses(*MANUAL):
            return
        fsdp1 = [s for s in script.calls if s.attr in FSDP1 and "fsdp" in (s.name or "").lower()]
        shards = [s for s in script.calls if s.attr == "fully_shard"]
        if len(fsdp1) == 1 and not shards and root_only(fsdp1[0].node):
            site = fsdp1[0]
            yield Hit(site.line, site.node.col_offset,
                      "FSDP without auto_wrap_policy wraps the root only: one unit, whose parameters are all gathered "
                      "for the whole forward and backward; pass an auto_wrap_policy (the transformer block class, "
                      "or size_based_auto_wrap_policy)")
