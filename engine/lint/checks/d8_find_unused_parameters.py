"""D8 (note): find_unused_parameters=True costs a graph walk every step and can hide a real bug."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit


class FindUnusedParameters(Check):
    code = "D8"
    slug = "find-unused-parameters"
    severity = "note"
    summary = "find_unused_parameters=True: an extra traversal every iteration; use only if parameters go unused"

    def find(self, script):
        for site in script.calls:
            for kw in site.node.keywords:
                if kw.arg == "find_unused_parameters" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                    yield Hit(kw.value.lineno, kw.value.col_offset,
                              "find_unused_parameters=True walks the autograd graph every iteration; keep it only if "
                              "some parameters really get no gradient (and then find out why)")
        for s in script.strings:
            value = getattr(s.node, "value", None)
            if value == "ddp_find_unused_parameters_true":
                yield Hit(s.node.lineno, s.node.col_offset,
                          "strategy ddp_find_unused_parameters_true walks the autograd graph every iteration; "
                          "keep it only if some parameters really get no gradient")
