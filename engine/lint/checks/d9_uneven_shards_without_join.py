"""D9: a DDP script that splits its data per rank in a way that can leave ranks with different numbers of batches,
and trains without Join: the rank that runs out first leaves the loop while the others wait in the gradient
all-reduce of their extra step, until the collective timeout."""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit

JOINED = ("Join", "join_uneven_inputs", "Joinable")
# frameworks that even the ranks out themselves (accelerate's even_batches, Lightning's sampler) or own the loop
FRAMEWORKS = ("deepspeed", "accelerate", "lightning", "pytorch_lightning")
# calls that read data from a path: a path built from the rank is a per-rank file, whose length is its own
READERS = frozenset({"load", "load_dataset", "load_from_disk", "open", "read_csv", "read_json", "read_parquet",
                     "loadtxt", "memmap", "load_file", "read_table", "ImageFolder", "from_file"})


class UnevenShardsWithoutJoin(Check):
    code = "D9"
    slug = "uneven-shards-without-join"
    severity = "warning"
    summary = "DDP over per-rank shards that can differ in length, without Join: the last step hangs"

    def find(self, script):
        if not script.uses("DistributedDataParallel", "DDP") or script.uses(*JOINED) or _ddp_join(script) or \
                script.imports_any(*FRAMEWORKS) or not _trains_over_data(script):
            return
        site = _uneven_split(script)
        if site is not None:
            node, what = site
            yield Hit(node.lineno, node.col_offset,
                      f"{what}: ranks can get different numbers of batches, and the rank that runs out first "
                      "leaves the loop while the others wait in the all-reduce of their extra step until the "
                      "collective timeout; train under `with Join([model]):` or give every rank the same number "
                      "of batches (DistributedSampler pads the shards to equal length)")


def _ddp_join(script) -> bool:
    """`with model.join():` (DDP's own context: keyword arguments only, where os.path.join and str.join take
    positional ones)."""
    return any(site.attr == "join" and not site.node.args and site.recv for site in script.calls)


def _writes(node: ast.Call) -> bool:
    """open(path, "w"): a file the rank writes (its log), not data it reads."""
    mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax")


def _trains_over_data(script) -> bool:
    """A loop over something other than range() that calls backward(): a pass over the data, whose length decides
    how many steps the rank takes (a loop over range(steps) takes the same number on every rank)."""
    for loop in script.index.of(ast.For):
        it = loop.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            continue
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
               for stmt in loop.body for n in ast.walk(stmt)):
            return True
    return False


def _uneven_split(script) -> tuple[ast.AST, str] | None:
    """The first place the data is split by rank into shards of possibly unequal length, and what it is."""
    ranks = script.ranks
    for site in script.calls:
        node = site.node
        if site.attr == "split_dataset_by_node":
            return node, "split_dataset_by_node() shards the dataset by rank"
        if site.attr == "shard" and (any(k.arg in ("num_shards", "index") for k in node.keywords)
                                     or any(ranks.is_rank_value(a) for a in node.args)):
            return node, "Dataset.shard() by rank gives shards that differ by a row when the length does not divide"
        if site.attr in READERS and not _writes(node) and any(_built_from_rank(a, ranks) for a in [*node.args, *(k.value for k in node.keywords)]):
            return node, "each rank reads its own file (the path is built from the rank), whose length is its own"
    if "::" in script.text:  # data[rank::world_size]: one in every N rows, from the rank's own offset
        for node in ast.walk(script.tree):
            if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) and node.slice.step is not None
                    and node.slice.lower is not None and ranks.is_rank_value(node.slice.lower)):
                return node, f"{ast.unparse(node)[:60]} strides the data by rank"
    return None


def _built_from_rank(node: ast.AST, ranks) -> bool:
    """An f-string, %-format or .format() that puts a rank into the text: f"part-{rank}.pt"."""
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) and ranks.is_rank_value(v.value) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
        parts = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        return any(ranks.is_rank_value(p) for p in parts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return any(ranks.is_rank_value(a) for a in [*node.args, *(k.value for k in node.keywords)])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join":
        return any(_built_from_rank(a, ranks) for a in node.args)  # os.path.join(root, f"part-{rank}")
    return False
