"""D10 (note): BatchNorm layers under DDP keep per-GPU statistics unless converted to SyncBatchNorm."""
from __future__ import annotations

import re

from gpudoctor.engine.lint.model import Check, Hit

# torchvision's classification models with BatchNorm, and its segmentation models built on them (fcn_resnet50,
# deeplabv3_mobilenet_v3_large, lraspp_...); its detection models freeze BatchNorm (FrozenBatchNorm2d), so not those
BN_MODELS = re.compile(r"^(?:(?:fcn|deeplabv3|lraspp)_)?(?:resnet|resnext|wide_resnet|densenet|mobilenet|efficientnet|regnet|inception|googlenet"
                       r"|mnasnet|shufflenet|vgg\d+_bn)")


class BatchNormWithoutSyncBN(Check):
    code = "D10"
    slug = "batchnorm-without-syncbn"
    severity = "note"
    summary = "BatchNorm under DDP without SyncBatchNorm: statistics from each GPU's small batch only"

    def find(self, script):
        if any("sync" in n.lower() and ("bn" in n.lower() or "batchnorm" in n.lower()) for n in script.names_used):
            return
        bn = next((s for s in script.calls if s.attr and (s.attr.startswith("BatchNorm")
                                                          or BN_MODELS.match(s.attr))), None)
        if bn is None:
            return
        for site in script.calls:
            if site.attr in ("DistributedDataParallel", "DDP"):
                yield Hit(site.line, site.node.col_offset,
                          f"the model has BatchNorm ({bn.attr}, line {bn.line}) and DDP keeps its statistics per "
                          "GPU; with small per-GPU batches convert it first: "
                          "nn.SyncBatchNorm.convert_sync_batchnorm(model)")
