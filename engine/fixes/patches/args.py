"""D1: the local-rank argument accepted under both spellings, whichever one the launcher passes."""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.lint.checks.d1_local_rank_one_spelling import SPELLINGS


def _one(call: cst.Call) -> int | None:
    """Index of the one local-rank spelling among an add_argument call's positional strings."""
    if h.last(h.call_name(call)) != "add_argument":
        return None
    found = [i for i, a in enumerate(call.args) if a.keyword is None and a.star == ""
             and isinstance(a.value, cst.SimpleString) and a.value.evaluated_value in SPELLINGS]
    spelled = {call.args[i].value.evaluated_value for i in found}
    return found[0] if len(spelled) == 1 else None


def local_rank_both_spellings(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    module = h.parse(text, path)
    changed = []

    def fix(call):
        i = _one(call)
        if i is None:
            return None
        arg = call.args[i]
        one = arg.value.evaluated_value
        other = SPELLINGS[1 - SPELLINGS.index(one)]
        quoted = arg.value.value.replace(one, other)
        args = list(call.args)
        args.insert(i + 1, arg.with_changes(value=cst.SimpleString(quoted), comma=arg.comma))
        if args[i].comma is cst.MaybeSentinel.DEFAULT:  # it was the last argument: now it is followed by one
            args[i] = args[i].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        changed.append(one)
        return call.with_changes(args=args)

    module = h.replace_calls(module, fix)
    if not changed:
        raise NotApplicable(f"{path}: no add_argument(...) that takes --local_rank or --local-rank alone")
    return module.code, ["the value is the same under either spelling (args.local_rank); under torchrun neither is "
                         "passed, so read os.environ['LOCAL_RANK'] there"]

