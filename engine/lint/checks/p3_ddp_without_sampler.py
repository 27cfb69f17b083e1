"""P3: a DDP script whose training DataLoader has no DistributedSampler, so every rank sees the same data."""
from __future__ import annotations

from gpudoctor.engine.lint.model import Check, Hit

SHARDING_NAMES = ("DistributedSampler", "split_dataset_by_node", "shard", "num_replicas", "ElasticSampler",
                  "DistributedBatchSampler", "prepare", "prepare_data_loader", "setup_dataloaders", "IterableDataset",
                  "sampler", "batch_sampler", "Subset", "num_shards", "shard_id")


class DDPWithoutSampler(Check):
    code = "P3"
    slug = "ddp-without-distributed-sampler"
    severity = "warning"
    summary = "DDP with a DataLoader that has no DistributedSampler: each rank trains on the same batches"

    def find(self, script):
        if not script.uses("DistributedDataParallel", "DDP") or script.uses(*SHARDING_NAMES) or \
                script.imports_any("deepspeed", "accelerate", "lightning", "pytorch_lightning"):
            return
        for site in script.calls:
            if site.attr != "DataLoader" or site.gate is not None:
                continue
            if any(k.arg in ("sampler", "batch_sampler") for k in site.node.keywords):
                continue
            yield Hit(site.line, site.node.col_offset,
                      "this DataLoader in a DDP script has no DistributedSampler: every rank reads the same "
                      "batches, so N GPUs train on one GPU's worth of data; pass "
                      "sampler=DistributedSampler(dataset)")
