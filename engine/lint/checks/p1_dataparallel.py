"""P1: nn.DataParallel instead of DistributedDataParallel."""
from __future__ import annotations

from gpudoctor.engine.lint.model import Check, Hit


class DataParallel(Check):
    code = "P1"
    slug = "dataparallel-instead-of-ddp"
    severity = "warning"
    summary = "nn.DataParallel: one process, GIL-bound, GPU 0 overloaded; DistributedDataParallel is faster"

    def find(self, script):
        for site in script.calls:
            if site.attr == "DataParallel" and (site.name or "").startswith(("torch", "nn", "DataParallel")):
                yield Hit(site.line, site.node.col_offset,
                          "nn.DataParallel runs every GPU from one process: GPU 0 gathers outputs and is "
                          "overloaded, and it is usually 2-3x slower than DistributedDataParallel under torchrun")
