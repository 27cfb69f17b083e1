"""P3: a DDP script whose training DataLoader has no DistributedSampler, or whose IterableDataset never splits its
stream by rank, so every rank sees the same data."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

# what splits the data of the whole script another way than a sampler per loader
SHARDING_NAMES = ("split_dataset_by_node", "shard", "prepare", "prepare_data_loader", "setup_dataloaders",
                  "IterableDataset", "Subset", "num_shards", "shard_id")
# a sampler the script builds: the loaders without one are then most likely the evaluation loaders
SAMPLER_NAMES = ("DistributedSampler", "ElasticSampler", "DistributedBatchSampler", "num_replicas")
SAMPLER_ARG = 3  # DataLoader(dataset, batch_size, shuffle, sampler, ...)


class DDPWithoutSampler(Check):
    code = "P3"
    slug = "ddp-without-distributed-sampler"
    severity = "warning"
    summary = "DDP with a DataLoader that has no DistributedSampler: each rank trains on the same batches"

    def find(self, script):
        if not script.uses("DistributedDataParallel", "DDP") or \
                script.imports_any("deepspeed", "accelerate", "lightning", "pytorch_lightning"):
            return
        stream = _unsplit_stream(script)
        if stream is not None:
            yield Hit(stream.lineno, stream.col_offset,
                      f"{stream.name} is an IterableDataset that never splits its stream by rank: under DDP every "
                      "rank iterates the same samples (a sampler cannot be passed to it); in __iter__ keep every "
                      "world_size-th item from the rank's own offset (itertools.islice(stream, rank, None, "
                      "world_size)), or shard with datasets' split_dataset_by_node")
            return
        if script.uses(*SHARDING_NAMES):
            return
        loaders = [site for site in script.calls if site.attr == "DataLoader" and site.gate is None]
        sampled = script.uses(*SAMPLER_NAMES) or any(_has_sampler(site.node) for site in loaders)
        for site in loaders:
            if _has_sampler(site.node):
                continue
            if sampled and not _shuffles(site.node):
                continue  # beside a loader with its own sampler, an unshuffled one is an evaluation loader
            yield Hit(site.line, site.node.col_offset,
                      "this DataLoader in a DDP script has no DistributedSampler: every rank reads the same "
                      "batches, so N GPUs train on one GPU's worth of data; pass "
                      "sampler=DistributedSampler(dataset)")


def _has_sampler(call: ast.Call) -> bool:
    return len(call.args) > SAMPLER_ARG or any(k.arg in ("sampler", "batch_sampler") for k in call.keywords)


def _shuffles(call: ast.Call) -> bool:
    """shuffle=True (or any value that is not a plain False/None): a training loader."""
    value = next((k.value for k in call.keywords if k.arg == "shuffle"),
                 call.args[2] if len(call.args) > 2 else None)
    return value is not None and not (isinstance(value, ast.Constant) and value.value in (False, None))


# what a stream split by rank (or over several shards) mentions somewhere in its class
_SPLIT_WORDS = ("world_size", "get_world_size", "num_replicas", "num_shards", "shard", "split_dataset_by_node",
                "islice", "num_processes", "n_shards", "nodes")


def _unsplit_stream(script) -> ast.ClassDef | None:
    """A class of this file that subclasses IterableDataset, is handed to a DataLoader, and whose body reads no rank
    and no world size: each rank then iterates the whole stream."""
    if not script.uses("IterableDataset"):
        return None
    loaded = {ast.unparse(a) for site in script.calls if site.attr == "DataLoader" for a in site.node.args[:1]}
    for node in script.index.of(ast.ClassDef):
        if not any((last or "").endswith("IterableDataset") for last in map(_base_name, node.bases)):
            continue
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
                {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
        if names & set(_SPLIT_WORDS) or any(script.ranks.is_rank_value(n) for n in ast.walk(node)
                                           if isinstance(n, (ast.Name, ast.Attribute, ast.Call))):
            continue
        if any(node.name in text for text in loaded) or _instance_loaded(script, node.name, loaded):
            return node
    return None


def _base_name(base: ast.expr) -> str | None:
    return base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None


def _instance_loaded(script, cls: str, loaded: set[str]) -> bool:
    """`ds = Stream(...)` and then `DataLoader(ds, ...)`."""
    return any(isinstance(value, ast.Call) and _base_name(value.func) == cls and set(names) & loaded
               for names, value in script.assigns)
