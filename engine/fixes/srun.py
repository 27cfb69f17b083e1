"""srun in front of a launcher (SLURM): split its options off a launch command, and the two rewrites that set it right.

A batch script runs on the first node of the allocation only; srun starts a command on every node, as many copies
per node as --ntasks-per-node says. torchrun and `accelerate launch` start one worker per GPU themselves, so they
want exactly one copy per node: none at all on the other nodes is D2 (the rendezvous waits for nodes that never
start), several per node is D27 (each copy starts workers for every GPU).
"""
from __future__ import annotations

from gpudoctor.engine.fixes.errors import FixError, NotApplicable

# srun's options that take no value (everything else takes one, as --opt=v, --opt v, -Nv or -N v); long options
# whose argument is optional only ever take it after "="
_FLAGS = {"-l", "--label", "-u", "--unbuffered", "--exclusive", "--overlap", "-K", "--kill-on-bad-exit", "--pty",
          "-Q", "--quiet", "-v", "--verbose", "-X", "--disable-status", "-O", "--overcommit", "-k", "--no-kill",
          "-E", "--preserve-env", "-s", "--oversubscribe", "-Z", "--no-allocate", "--multi-prog", "-H", "--hold",
          "--test-only", "--spread-job", "--use-min-nodes", "--contiguous", "-I", "--immediate"}
# what decides how many copies srun starts on a node
_PER_NODE = {"--ntasks-per-node", "-n", "--ntasks", "--ntasks-per-gpu", "--ntasks-per-socket", "--ntasks-per-core",
             "--gpus-per-task", "--tasks-per-node"}
PER_NODE_LAUNCHERS = ("torchrun", "accelerate")


def split_srun(words: list[str]) -> tuple[list[str], list[str]]:
    """(srun and its options, the command it runs) when words start with srun; ([], words) otherwise."""
    if not words or words[0].rsplit("/", 1)[-1] != "srun":
        return [], words
    i = 1
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        if word == "--":
            i += 1
            break
        i += 2 if _takes_value(word) else 1
    if i > len(words):
        raise FixError(f"--cmd: srun option {words[-1]} needs a value")
    return words[:i], words[i:]


def copies_per_node(wrapper: list[str]) -> int | None:
    """How many copies of the command srun starts on each node, when its options say so."""
    for i, word in enumerate(wrapper):
        for name in ("--ntasks-per-node", "--tasks-per-node"):
            value = word[len(name) + 1:] if word.startswith(name + "=") else (
                wrapper[i + 1] if word == name and i + 1 < len(wrapper) else None)
            if value is not None and value.isdigit():
                return int(value)
    return None


def _takes_value(word: str) -> bool:
    """Whether the next word is this option's value: not for a flag, --opt=v, or a short option with it attached
    (-N2)."""
    return not (word in _FLAGS or "=" in word or (len(word) > 2 and not word.startswith("--")))


def _option_name(word: str) -> str:
    if word.startswith("--"):
        return word.split("=", 1)[0]
    return word[:2]


def _without(wrapper: list[str], names: set[str]) -> list[str]:
    """srun's words without the given options (and their values)."""
    kept, i = [wrapper[0]], 1
    while i < len(wrapper):
        word = wrapper[i]
        step = 2 if word.startswith("-") and _takes_value(word) else 1
        if _option_name(word) not in names:
            kept += wrapper[i:i + step]
        i += step
    return kept


def one_task_per_node(launch, facts: dict, notes: list[str]) -> list[str]:
    """D27: srun starts one copy of torchrun (or accelerate) per node; the launcher starts the workers."""
    if not launch.wrapper:
        raise NotApplicable("--cmd has no srun in front: nothing starts several launchers per node")
    if launch.launcher not in PER_NODE_LAUNCHERS:
        raise NotApplicable(f"under srun, {launch.launcher} is one worker per task: srun's task count is the rank count")
    launch.wrapper = [*_without(launch.wrapper, _PER_NODE), "--ntasks-per-node=1"]
    notes.append(f"srun now starts one {launch.launcher} per node, which starts one worker per GPU")
    return _same(launch)


def srun_per_node(launch, facts: dict, notes: list[str]) -> list[str]:
    """D2 under SLURM: the launcher started on every node by srun instead of on the batch script's node alone."""
    if launch.wrapper:
        raise NotApplicable("--cmd already runs under srun")
    if launch.launcher not in PER_NODE_LAUNCHERS:
        raise NotApplicable(f"{launch.launcher} alone starts one process: srun it once per GPU instead")
    launch.wrapper = ["srun", "--ntasks-per-node=1"]
    notes.append("in a SLURM batch script: srun starts this command once on every node of the job")
    if launch.launcher == "torchrun" and (launch.option("--standalone") is not None
                                          or not launch.option("--rdzv-endpoint", "--master-addr")):
        # each node's torchrun would make its own rendezvous: they meet at the first node's, as D2's own rewrite
        # writes it, with SLURM's variables for what the batch script knows (its notes, about running the command on
        # every node by hand, are srun's job here)
        from gpudoctor.engine.fixes.launch import _torchrun_multinode

        notes.append("set HEAD_NODE first, in the batch script: "
                     "HEAD_NODE=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)")
        slurm = {"nnodes": "$SLURM_NNODES", "master_addr": "$HEAD_NODE", "job_id": "$SLURM_JOB_ID"}
        return _torchrun_multinode(launch, {**facts, **slurm}, [])
    return _same(launch)


def _same(launch) -> list[str]:
    """The launcher's own words unchanged (the rewrite is srun's)."""
    from gpudoctor.engine.fixes.launch import _env, _opts, _script_words

    head = ["accelerate", "launch"] if launch.launcher == "accelerate" else [launch.launcher]
    return [*_env(launch), *head, *_opts(launch.options), *_script_words(launch, launch.launcher)]
