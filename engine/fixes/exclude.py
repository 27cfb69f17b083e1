"""MN8: relaunch without the faulty GPU or node, in the launcher's own terms.

A GPU with an uncorrectable ECC error, or one that fell off the bus, fails again on the next run; until it is reset
or serviced the job has to run without it. Which one failed is a fact of the log (the host or NCCL device in the
prefix of the line that reported it) or of the user (--param bad_host=node17, --param bad_gpu=3, as nvidia-smi and
dmesg on the node name it). Each launcher leaves a node or a GPU out differently:
- srun: `--exclude=host` keeps the job step off the node (the allocation still holds it: drain it for the next one);
- the deepspeed launcher: `--exclude=host` or `--exclude=localhost:3` (it refuses --num_gpus/--num_nodes beside
  it, so those go);
- torchrun or accelerate on one node: CUDA_VISIBLE_DEVICES lists the healthy GPUs and the process count drops by one;
- torchrun on several nodes: the node is not started at all, so --nnodes drops by one (a MIN:MAX range already
  lets the job go on without it).
"""
from __future__ import annotations

from gpudoctor.engine.fixes.errors import NotApplicable

_ASK = ("give --param bad_host=NODE (several nodes) or --param bad_gpu=N (one node): nvidia-smi -q -d ECC and "
        "dmesg on the node say which GPU failed")


def exclude_faulty(launch, facts: dict, notes: list[str]) -> list[str]:
    from gpudoctor.engine.fixes.launch import _count

    host = _count(facts, "bad_host")
    gpu = _count(facts, "bad_gpu")
    if gpu is not None and not str(gpu).isdigit():
        raise NotApplicable(f"bad_gpu={gpu}: expected the GPU's index on its node (nvidia-smi's first column)")
    gpu = None if gpu is None else int(gpu)
    if host is None and gpu is None:
        raise NotApplicable(_ASK)
    if launch.wrapper:
        return _srun(launch, host, notes)
    if launch.launcher == "deepspeed":
        return _deepspeed(launch, host, gpu, notes)
    if launch.launcher in ("torchrun", "accelerate"):
        nodes = _nodes(launch)
        if nodes not in ("1", None) or (host is not None and gpu is None):
            return _multinode(launch, host, nodes, notes)
        return _one_node(launch, gpu, facts, notes)
    raise NotApplicable("a plain python run: hide the GPU with CUDA_VISIBLE_DEVICES listing the others")


def _srun(launch, host, notes: list[str]) -> list[str]:
    from gpudoctor.engine.fixes.srun import _option_name, _takes_value, _same

    if host is None:
        raise NotApplicable("under srun a node is what can be left out: give --param bad_host=NODE")
    wrapper, i, listed = [launch.wrapper[0]], 1, []
    while i < len(launch.wrapper):  # fold an --exclude/-x srun already has into the new one
        word = launch.wrapper[i]
        step = 2 if word.startswith("-") and _takes_value(word) else 1
        if _option_name(word) in ("--exclude", "-x"):
            value = launch.wrapper[i + 1] if step == 2 else word.split("=", 1)[1] if "=" in word else word[2:]
            listed += [h for h in value.split(",") if h]
        else:
            wrapper += launch.wrapper[i:i + step]
        i += step
    if host in listed:
        raise NotApplicable(f"srun already excludes {host}")
    wrapper, counted = _one_fewer(wrapper, ("-N", "--nodes"))
    launch.wrapper = [*wrapper, f"--exclude={','.join([*listed, host])}"]
    if not counted:
        notes.append(f"srun leaves {host} out of this step; in an allocation of exactly the nodes the job needs, "
                     f"submit again with sbatch --exclude={host}")
    notes.append(f"drain the node so that no other job lands on it: scontrol update nodename={host} state=drain "
                 f"reason=\"GPU fault\"")
    nodes = _nodes(launch)
    if launch.launcher in ("torchrun", "accelerate") and nodes not in ("1", None) and ":" not in nodes:
        return _counted_down(launch, host, nodes, notes)
    return _same(launch)


def _one_fewer(words: list[str], names: tuple[str, ...]) -> tuple[list[str], bool]:
    """srun's words with its node count (-N 4, -N4, --nodes=4) one lower; whether there was one to lower."""
    out, i, done = [], 0, False
    while i < len(words):
        word = words[i]
        for name in names:
            if word == name and i + 1 < len(words) and words[i + 1].isdigit() and int(words[i + 1]) > 1:
                out += [word, str(int(words[i + 1]) - 1)]
                i, done = i + 2, True
                break
            value = word[len(name) + 1:] if word.startswith(name + "=") else word[len(name):] if (
                len(name) == 2 and word.startswith(name)) else None
            if value and value.isdigit() and int(value) > 1:
                out.append(word[: len(word) - len(value)] + str(int(value) - 1))
                i, done = i + 1, True
                break
        else:
            out.append(word)
            i += 1
    return out, done


def _deepspeed(launch, host, gpu, notes: list[str]) -> list[str]:
    from gpudoctor.engine.fixes.launch import _env, _kept, _script_words

    include = launch.option("--include")
    if include:
        raise NotApplicable(f"--include={include} lists what the job uses: take the faulty "
                            f"{'node' if host else 'GPU'} out of that list")
    if host is None and launch.option("--hostfile", "-H"):
        raise NotApplicable("the job runs on the hostfile's nodes: give --param bad_host=NODE to say which one")
    if host is not None:
        spec = host
        notes.append(f"the whole of {host} is left out; to keep its healthy GPUs use --exclude={host}:N instead")
    else:
        spec = f"localhost:{gpu}"
    spec = "@".join([*(launch.option("--exclude") or "").split("@"), spec]).strip("@")
    dropped = [n for n in ("--num_gpus", "--num_nodes") if launch.option(n) is not None]
    if dropped:
        notes.append(f"{' and '.join(dropped)} dropped: the deepspeed launcher refuses them beside --exclude")
    return [*_env(launch), "deepspeed", f"--exclude={spec}",
            *_kept(launch, "deepspeed", {"--exclude", "--num_gpus", "--num_nodes"}), *_script_words(launch, "deepspeed")]


def _nodes(launch) -> str | None:
    if launch.launcher == "torchrun":
        return None if launch.option("--standalone") is not None else launch.option("--nnodes")
    return launch.option("--num_machines")


def _multinode(launch, host, nodes, notes: list[str]) -> list[str]:
    if host is None:
        raise NotApplicable("the job runs on several nodes: give --param bad_host=NODE to leave that node out")
    if nodes in ("1", None):
        raise NotApplicable(f"the whole job runs on {host}: run it on another node, or give --param bad_gpu=N to "
                            "leave only the faulty GPU out")
    notes.append(f"do not start this command on {host}; run it on every other node")
    return _counted_down(launch, host, nodes, notes)


def _counted_down(launch, host, nodes: str, notes: list[str]) -> list[str]:
    """The launcher's words with one node fewer."""
    from gpudoctor.engine.fixes.launch import _env, _kept, _script_words

    endpoint = launch.option("--rdzv-endpoint", "--master-addr", "--main_process_ip") or ""
    if endpoint.split(":")[0] == host:
        notes.append(f"the rendezvous is on {host}: point it at one of the other nodes")
    if launch.launcher == "torchrun":
        if ":" in nodes:
            raise NotApplicable(f"--nnodes={nodes} is a range: the job goes on without {host} while the other nodes "
                                "meet its minimum; do not start it there")
        if not nodes.isdigit() or int(nodes) < 2:
            raise NotApplicable(f"--nnodes={nodes}: expected a node count")
        if launch.option("--node-rank", "--node_rank") is not None:
            notes.append("renumber --node-rank on the remaining nodes from 0 to one less than --nnodes")
        return [*_env(launch), "torchrun", f"--nnodes={int(nodes) - 1}", *_kept(launch, "torchrun", {"--nnodes"}),
                *_script_words(launch, "torchrun")]
    total = launch.option("--num_processes")
    if not (nodes.isdigit() and int(nodes) >= 2 and total and total.isdigit() and int(total) % int(nodes) == 0):
        raise NotApplicable("give accelerate --num_machines and --num_processes as numbers to count them down")
    per = int(total) // int(nodes)
    notes.append("renumber --machine_rank on the remaining machines from 0")
    return [*_env(launch), "accelerate", "launch", f"--num_machines={int(nodes) - 1}",
            f"--num_processes={int(total) - per}", *_kept(launch, "accelerate", {"--num_machines", "--num_processes"}),
            *_script_words(launch, "accelerate")]


def _one_node(launch, gpu, facts: dict, notes: list[str]) -> list[str]:
    from gpudoctor.engine.fixes.launch import _count, _env, _kept, _script_words

    option = "--nproc-per-node" if launch.launcher == "torchrun" else "--num_processes"
    count = launch.option(option) or _count(facts, "nproc")
    visible = [w.split("=", 1)[1] for w in launch.env if w.startswith("CUDA_VISIBLE_DEVICES=")]
    if visible:
        ids = [d for d in visible[-1].split(",") if d]
        if str(gpu) not in ids:
            raise NotApplicable(f"CUDA_VISIBLE_DEVICES={visible[-1]} does not list GPU {gpu}: the job does not use it")
        count = count if str(count or "").isdigit() else len(ids)
    else:
        if not str(count or "").isdigit():
            raise NotApplicable("give --param nproc=N, the number of GPUs on the node, to list the healthy ones")
        ids = [str(i) for i in range(int(count))]
        if str(gpu) not in ids:
            raise NotApplicable(f"bad_gpu={gpu}: the job starts {count} processes, on GPUs 0 to {int(count) - 1}")
    healthy = [d for d in ids if d != str(gpu)]
    if not healthy:
        raise NotApplicable(f"GPU {gpu} is the only one the job uses: run it on another node")
    nproc = min(int(count), len(healthy))
    env = [w for w in _env(launch) if not w.startswith("CUDA_VISIBLE_DEVICES=")]
    notes.append(f"the job runs on {len(healthy)} GPU(s), without GPU {gpu}: the global batch is smaller unless the "
                 "per-GPU batch or gradient accumulation grows to match")
    head = ["torchrun"] if launch.launcher == "torchrun" else ["accelerate", "launch"]
    return [*env, f"CUDA_VISIBLE_DEVICES={','.join(healthy)}", *head, f"{option}={nproc}",
            *_kept(launch, launch.launcher, {option}), *_script_words(launch, launch.launcher)]
