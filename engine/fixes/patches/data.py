"""Data patches: P3, a DistributedSampler for each DataLoader of a DDP script that reads the same data on every rank."""
from __future__ import annotations

import libcst as cst

from gpudoctor.engine.fixes import cst as h
from gpudoctor.engine.fixes.errors import NotApplicable

# what already splits the data between ranks for the whole script (as the lint's P3 check reads it)
SHARDING = ("split_dataset_by_node", "prepare_data_loader", "setup_dataloaders")
# a sampler built somewhere: the loaders without one are then left alone unless they shuffle (training loaders)
SAMPLERS = ("DistributedSampler", "ElasticSampler", "DistributedBatchSampler", "num_replicas", "batch_sampler",
            "sampler=")


def _code_only(text: str) -> str:
    """The script without its import lines: a name only imported (left-over boilerplate) splits nothing."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("import ", "from ")))


def _dataset_arg(call: cst.Call) -> cst.Arg | None:
    """The DataLoader's dataset argument, when it is a plain name or attribute (read twice, so no call)."""
    arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "dataset"),
               call.args[0] if call.args and call.args[0].keyword is None else None)
    return arg if arg is not None and isinstance(arg.value, (cst.Name, cst.Attribute)) else None


def _sampler_name(target: str, taken: set[str]) -> str:
    base = target[:-len("loader")] + "sampler" if target.endswith("loader") else f"{target}_sampler"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}{k}", k + 1
    return name


def distributed_sampler(text: str, path: str, facts: dict) -> tuple[str, list[str]]:
    """`loader = DataLoader(ds, shuffle=S, ...)` in a DDP script becomes `sampler = DistributedSampler(ds, shuffle=S)`
    and `DataLoader(ds, sampler=sampler, ...)`: each rank reads its own 1/N of the data, in the order it read before
    (DataLoader's shuffle moves to the sampler, which rejects both). Loaders in a rank-0 branch are left alone."""
    h.require_ddp(text, path)
    code = _code_only(text)
    if any(word in code for word in SHARDING):
        raise NotApplicable(f"{path}: the data is already split between ranks ({', '.join(w for w in SHARDING if w in code)})")
    sampled = any(word in code for word in SAMPLERS)
    module = h.parse(text, path)
    taken = h.variable_names(module)
    made: list[str] = []
    # only the loaders lint's P3 check reports: a dataset already split by rank (a Subset of every N-th sample, a
    # shard) would be split again, and each rank would train on 1/N² of the data
    flagged = h.flagged_lines(text, path, "P3")

    def rewrite(stmts, block):
        if block.gated:
            return stmts
        out = []
        for s in stmts:
            small = s.body[0] if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 else None
            if small is not None and h.first_line(s) not in flagged:
                small = None
            call = small.value if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call) else None
            if call is None or h.last(h.call_name(call)) != "DataLoader" or h.kwarg(call, "sampler") is not None \
                    or _dataset_arg(call) is None or not isinstance(small.targets[0].target, cst.Name):
                out.append(s)
                continue
            shuffle = h.kwarg(call, "shuffle")
            if sampled and (shuffle is None or h.code(shuffle.value) in ("False", "None")):
                out.append(s)  # beside a loader with its own sampler, an unshuffled one is an evaluation loader
                continue
            name = _sampler_name(small.targets[0].target.value, taken)
            taken.add(name)
            made.append(name)
            dataset = h.code(_dataset_arg(call).value)
            order = h.code(shuffle.value) if shuffle is not None else "False"
            if shuffle is None:
                new_call = h.add_kwarg(call, "sampler", cst.Name(name))
            else:  # sampler= takes shuffle='s place, and so its layout
                new_call = call.with_changes(args=[a.with_changes(keyword=cst.Name("sampler"), value=cst.Name(name))
                                                   if a is shuffle else a for a in call.args])
            sampler = h.stmt(f"{name} = DistributedSampler({dataset}, shuffle={order})")
            out.append(sampler.with_changes(leading_lines=s.leading_lines))
            out.append(s.with_changes(leading_lines=(), body=[small.with_changes(value=new_call)]))
        return out

    module = h.rewrite_bodies(module, rewrite)
    if not made:
        raise NotApplicable(f"{path}: no `loader = DataLoader(dataset, ...)` that lint reports reading the same data on "
                            "every rank (outside a rank-0 branch, over a dataset not already split by rank)"
                            + (" (beside a sampler, only a shuffling loader is changed)" if sampled else ""))
    module = h.add_import(module, "from torch.utils.data.distributed import DistributedSampler", "DistributedSampler")
    code = module.code
    notes = [f"each rank now reads 1/N of the data ({', '.join(made)}): an epoch has N times fewer steps per rank"]
    from gpudoctor.engine.fixes.patches.loops import sampler_set_epoch

    try:  # a new sampler reshuffles only when told the epoch: D22's patch, in the same edit
        code, more = sampler_set_epoch(code, path, facts)
        notes += more
    except NotApplicable:
        notes.append(f"call {made[0]}.set_epoch(epoch) at the top of every epoch, or the shuffle repeats")
    if len(made) > 1:
        notes.append("a metric computed over a validation loader now covers 1/N of it on each rank: all_reduce it, "
                     "or keep that loader whole and evaluate on every rank")
    return code, notes
