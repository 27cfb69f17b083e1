"""A state-dict load whose shapes differ by a whole factor in the first dimension only: a full checkpoint loaded into
a model sharded over that many ranks, or a rank's shard loaded into the whole model (D15)."""
from __future__ import annotations

import math

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy

# torch/nn/modules/module.py _load_from_state_dict (torch 1.0-2.x): 'size mismatch for {}: copying a param with
# shape {} from checkpoint, the shape in current model is {}.' FSDP2's fully_shard and DTensor's Shard(0) split every
# parameter along dim 0 into world-size chunks (torch.chunk: ceil(n / k) rows, the last ranks fewer), so a model whose
# parameters are local shards and a checkpoint holding the full tensors (or the reverse) differ exactly there.
_MISMATCH = _lazy(r"size mismatch for (?P<key>[\w.\-]+): copying a param with shape torch\.Size\(\[(?P<ckpt>[\d, ]*)\]\) "
                  r"from checkpoint, the shape in current model is torch\.Size\(\[(?P<model>[\d, ]*)\]\)")
# a classifier head or a resized vocabulary also changes only dim 0: the number of classes or tokens, not a shard
_HEAD = _lazy(r"(?:^|[._])(?:classifier|cls|fc|head|lm_head|logits|score|out|output|embed\w*|wte|word_embeddings|"
              r"vocab\w*|tok_embeddings|decoder)(?:[._]\d+)?\.(?:weight|bias)$")
MAX_WAYS = 128  # ranks a parameter is sharded over
# words only a sharded model's log holds: FSDP (1 and 2), DTensor, the older sharded tensors
_SHARDING = _lazy(r"FSDP|fully_shard|FullyShardedDataParallel|DTensor|ShardedTensor|FlatParameter|_flat_param")


def _ways(big: int, small: int) -> int | None:
    """k when small is big split k ways along dim 0 (exactly, or torch.chunk's ceil(big / k) for a large dim)."""
    if small <= 0 or big <= small:
        return None
    if big % small == 0 and big // small <= MAX_WAYS:
        return big // small
    if big >= 16:
        for k in range(2, MAX_WAYS + 1):
            if -(-big // k) == small:
                return k
    return None


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def sharded_full_mismatch(text: str, file: str) -> tuple[float, tuple[Evidence, Evidence]] | None:
    """(score, evidence) when every size mismatch of a load differs only in dim 0, by one whole factor: 0.8 when two
    or more parameters agree on it, 0.6 for a single one; None when any mismatch has another shape (a different
    architecture) or only heads and embeddings mismatch (a class count or vocabulary change)."""
    found: list[tuple[int, str, int]] = []
    flat: list[tuple[int, str, int]] = []
    placeholders = False  # a [0] tensor in the load: a shard that held none of that parameter
    for n, line in enumerate(text.splitlines(), start=1):
        if "size mismatch for" not in line:
            continue
        m = _MISMATCH.search(line)
        if m is None:
            return None
        ckpt, model = _dims(m.group("ckpt")), _dims(m.group("model"))
        if ckpt == (0,):
            placeholders = True
            continue  # an empty placeholder: a parameter this rank's shard did not hold (or ZeRO-3's), says no more
        if len(ckpt) == 1 and len(model) > 1:
            whole = math.prod(model)
            if not 0 < ckpt[0] < whole or whole / ckpt[0] > MAX_WAYS:
                return None
            flat.append((n, m.group("key"), round(whole / ckpt[0])))
            continue
        if not ckpt or len(ckpt) != len(model) or ckpt[1:] != model[1:]:
            return None
        k = _ways(max(ckpt[0], model[0]), min(ckpt[0], model[0]))
        if k is None:
            return None
        found.append((n, m.group("key"), k))
    if flat and not found:
        # FSDP's FlatParameter: one rank's flattened slice of several parameters, saved as a 1-D tensor where the
        # model has a matrix (a sharded state dict saved as if it were the full one)
        n, key, k = flat[0]
        why = Evidence(file, n, f"{key}: the checkpoint holds a flat 1-D tensor of about 1/{k} of the model's "
                                f"parameter: one rank's flattened FSDP shard saved as the whole model", "because")
        return 0.7, (Evidence(file, n, text.splitlines()[n - 1], "rule:sharded-vs-full-load"), why)
    if not found or len({k for _, _, k in found}) != 1:
        return None
    keys = {key for _, key, _ in found}
    if all(_HEAD.search(key) for key in keys):
        return None
    if all("." not in key for key in keys) and not placeholders and not _SHARDING.search(text):
        # the whole model is one layer (`weight`, `bias`): a layer resized between the checkpoint and the model (8
        # outputs now 4) reads the same as a 2-way shard, and nothing in the log says anything is sharded
        return None
    n, key, k = found[0]
    line = text.splitlines()[n - 1]
    why = Evidence(file, n, f"{key}: the checkpoint's and the model's shapes differ only in dim 0, by a factor of {k}: "
                            f"a full state dict against parameters sharded {k} ways, or the reverse", "because")
    return (0.8 if len(keys) > 1 else 0.6), (Evidence(file, n, line, "rule:sharded-vs-full-load"), why)
