"""The launch contract under SLURM (D1, D2, D3, D27): what srun and sbatch set against what torch reads.

torch's env:// rendezvous reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; SLURM sets its own
SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and friends, and a batch script runs on the first node of the allocation
only. Most multi-node SLURM failures are a mismatch between the two, and every one of them can be read from the
environment of the process before anything is started:

- the batch script itself (SLURM_JOB_ID without a step id) on a job of several nodes: whatever it starts runs on
  the first node alone, the others start nothing and the rendezvous waits for them (D2);
- a task srun started without the torch variables: a plain script cannot form the group (Lightning and submitit
  read SLURM's variables themselves) (D1);
- the torch variables set by hand but not per task: every task claims the same RANK or LOCAL_RANK (D1, D3), or
  WORLD_SIZE is not the number of tasks srun started (D1);
- MASTER_ADDR=localhost on a step that spans several nodes: each node meets only itself (D2);
- torchrun started by several srun tasks on one node: each of them starts its own workers for the same GPUs
  (D27).
"""
from __future__ import annotations

import re
from typing import Mapping

__all__ = ["slurm_context", "slurm_problems", "missing_contract", "describe"]

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "ip6-localhost"}
_REPEAT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        try:
            return int(env[name])
        except (KeyError, ValueError):
            continue
    return None


def tasks_per_node(spec: str | None) -> list[int] | None:
    """SLURM's compressed per-node counts ("2(x3),1" is 2, 2, 2, 1), or None when it does not parse."""
    if not spec:
        return None
    counts: list[int] = []
    for part in spec.split(","):
        m = _REPEAT.match(part.strip())
        if m is None:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def slurm_context(env: Mapping[str, str]) -> dict | None:
    """What SLURM says about this process: None outside a SLURM job."""
    if "SLURM_JOB_ID" not in env and "SLURM_JOBID" not in env:
        return None
    in_step = "SLURM_STEP_ID" in env or "SLURM_STEPID" in env
    nodes = _int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES") if in_step else \
        _int(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    per_node = tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE"))
    node_id = _int(env, "SLURM_NODEID")
    return {
        "job": env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"),
        "in_step": in_step,
        "nodes": nodes,
        "tasks": _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS") if in_step else None,
        "procid": _int(env, "SLURM_PROCID") if in_step else None,
        "localid": _int(env, "SLURM_LOCALID") if in_step else None,
        "tasks_here": per_node[node_id] if per_node and node_id is not None and node_id < len(per_node) else None,
    }


def slurm_problems(env: Mapping[str, str], ctx: dict) -> list[tuple[str, str]]:
    """Contradictions between SLURM's placement of this process and the variables torch will read."""
    problems: list[tuple[str, str]] = []
    torchrun = "TORCHELASTIC_RUN_ID" in env
    nodes = ctx["nodes"] or 1
    if not ctx["in_step"]:
        if nodes > 1:
            problems.append(("D2", f"this runs in the batch script of a {nodes}-node job, which SLURM runs on the "
                                   "first node only: the other nodes start nothing and the rendezvous waits for "
                                   "them; start the training with srun (one task per node for torchrun)"))
        return problems
    if torchrun:
        if ctx["tasks_here"] is not None and ctx["tasks_here"] > 1:
            problems.append(("D27", f"srun started {ctx['tasks_here']} tasks on this node and each runs torchrun, "
                                    "which starts its own workers for the same GPUs; use one task per node "
                                    "(--ntasks-per-node=1) and let torchrun start one worker per GPU"))
        return problems
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return problems  # said by the caller: not a contradiction, a missing contract
    rank, world, local = _int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK")
    if ctx["tasks"] is not None and world is not None and world != ctx["tasks"]:
        problems.append(("D1", f"WORLD_SIZE={world} but srun started {ctx['tasks']} tasks: set "
                               "WORLD_SIZE=$SLURM_NTASKS (inside the task, not in the batch script)"))
    if ctx["procid"] is not None and rank is not None and rank != ctx["procid"]:
        problems.append(("D1", f"RANK={rank} but this is task {ctx['procid']} (SLURM_PROCID): a RANK exported in "
                               "the batch script is the same for every task; set RANK=$SLURM_PROCID inside the task"))
    if ctx["localid"] is not None and local is not None and local != ctx["localid"]:
        problems.append(("D3", f"LOCAL_RANK={local} but this is local task {ctx['localid']} (SLURM_LOCALID): "
                               "tasks on one node pick the same GPU; set LOCAL_RANK=$SLURM_LOCALID inside the task"))
    addr = env.get("MASTER_ADDR", "").strip().lower()
    if nodes > 1 and addr in _LOCAL_HOSTS:
        problems.append(("D2", f"MASTER_ADDR={env['MASTER_ADDR']} on a step across {nodes} nodes: each node "
                               "meets only itself; use the first node's hostname (scontrol show hostnames "
                               "\"$SLURM_JOB_NODELIST\" | head -n 1)"))
    return problems


def missing_contract(ctx: dict) -> str:
    """Why a task srun started has no torch variables, and what a plain torch script needs."""
    where = f"task {ctx['procid']} of {ctx['tasks']}" if ctx["procid"] is not None and ctx["tasks"] else "a task"
    return (f"srun started {where} without RANK, WORLD_SIZE, MASTER_ADDR: torch's env:// reads none of SLURM's "
            "variables (Lightning and submitit do); export them per task from SLURM_PROCID, SLURM_NTASKS, "
            "SLURM_LOCALID, or run torchrun with one task per node")


def describe(ctx: dict) -> str:
    """One evidence line: where SLURM put this process."""
    if not ctx["in_step"]:
        return f"SLURM job {ctx['job']}: the batch script (first node of {ctx['nodes'] or '?'})"
    parts = [f"SLURM job {ctx['job']}: srun task {ctx['procid'] if ctx['procid'] is not None else '?'}"
             f" of {ctx['tasks'] or '?'}", f"local task {ctx['localid'] if ctx['localid'] is not None else '?'}"]
    if ctx["tasks_here"] is not None:
        parts.append(f"{ctx['tasks_here']} tasks on this node")
    parts.append(f"{ctx['nodes'] or '?'} node{'s' if (ctx['nodes'] or 0) != 1 else ''}")
    return ", ".join(parts)
