"""MN3 (note): init_process_group without timeout= leaves a dead rank hidden behind the default watchdog."""
from __future__ import annotations

from gpudoctor.engine.lint.model import Check, Hit


class InitWithoutTimeout(Check):
    code = "MN3"
    slug = "init-without-timeout"
    severity = "note"
    summary = "init_process_group() without timeout=: a dead rank shows only after the 10-30 minute default"

    def find(self, script):
        for site in script.calls:
            if site.attr != "init_process_group":
                continue
            if any(k.arg == "timeout" or k.arg is None for k in site.node.keywords) or len(site.node.args) >= 3:
                continue
            yield Hit(site.line, site.node.col_offset,
                      "init_process_group without timeout=: when one rank dies the others wait out the default "
                      "watchdog (10 min NCCL, 30 min gloo) before anything is reported; pass "
                      "timeout=datetime.timedelta(minutes=...) sized to your slowest collective")
