"""DeepSpeed 0.16's refusal of no_sync under ZeRO 2/3, read by who called no_sync.

DeepSpeedEngine.no_sync asserts "no_sync context manager is incompatible with gradient partitioning logic of ZeRO
stage N". Called from the user's own loop, the loop accumulates around the engine (D18). Called from accelerate,
transformers, trl or peft, it is the library's own accumulation meeting a DeepSpeed release that forbids it: a
version incompatibility (DeepSpeed issue #6793; pin DeepSpeed 0.15.4 or upgrade the library), not a setting of the
user's, so D18 is ruled out. With no caller frame printed, the message alone stays a possible cause (its signature
weighs under the report threshold).
"""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict

_ASSERT = "no_sync context manager is incompatible with gradient partitioning"
_FRAME = _lazy(r"""File "([^"]+)", line (\d+), in (\S+)""")
_LIBRARY = _lazy(r"[/\\](?:site|dist)-packages[/\\](?:accelerate|transformers|trl|peft|lightning|pytorch_lightning)[/\\]")
_OTHER_PACKAGE = _lazy(r"[/\\](?:site|dist)-packages[/\\]|[/\\]lib[/\\]python3\.\d+[/\\]")
LOOK_BACK = 24  # lines above the assertion where the frames that led to no_sync are printed
NOTE = ("DeepSpeed 0.16+ refuses no_sync under ZeRO 2/3, and here accelerate/transformers called it during their own "
        "gradient accumulation: a version incompatibility, not your loop. Pin deepspeed==0.15.4, or upgrade "
        "accelerate and transformers to releases that skip no_sync under DeepSpeed.")


def no_sync_rule(text: str, file: str) -> list[Verdict]:
    at = text.find(_ASSERT)
    if at < 0:
        return []
    before = text[:at].split("\n")  # its last item is the start of the error's own line
    error_no = len(before)
    start = max(0, error_no - 1 - LOOK_BACK)
    frames = [(i + 1, m) for i in range(error_no - 2, start - 1, -1) if (m := _FRAME.search(before[i]))]
    # the frames nearest the error first: skip DeepSpeed's own and contextlib's, the next one called no_sync
    caller = next(((no, m) for no, m in frames if "deepspeed" not in m.group(1) and "contextlib" not in m.group(1)),
                  None)
    if caller is None:
        return []
    no, m = caller
    here = Evidence(file, error_no, before[-1] + text[at:].split("\n", 1)[0], "rule:ds-no-sync-caller")
    if _LIBRARY.search(m.group(1)):
        return [Verdict("D18", "rule:ds-no-sync-from-library", (here,), rule_out=True, note=NOTE)]
    if _OTHER_PACKAGE.search(m.group(1)):
        return []
    why = Evidence(file, no, f"no_sync was called from the training loop itself: {m.group(1)}, in {m.group(3)}",
                   "because")
    return [Verdict("D18", "rule:ds-no-sync-own-loop", (here, why))]
