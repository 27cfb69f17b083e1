"""Checks of one launch command (torchrun, python -m torch.distributed.launch, accelerate launch, deepspeed, python,
each possibly behind srun): the launcher settings that are a catalogue cause on their face."""
from __future__ import annotations

import re

from gpudoctor.engine.lint.model import LintFinding

COMMAND = "<launch command>"  # the path a command's findings carry
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def check_command(cmd: str, read_script=None) -> list[LintFinding]:
    """The command's findings (path COMMAND, line 1); a command gpudoctor cannot parse raises FixError.
    `read_script(path)` gives the text of the training script the command names, or None where it is not at hand:
    with it, the checks that need the script too (MN5) run."""
    from gpudoctor.engine.fixes.launch import parse_launch

    launch = parse_launch(cmd)
    env = dict(word.split("=", 1) for word in launch.env)
    hits: list[tuple[str, str, str, str]] = []  # (entry, rule, severity, message)
    if launch.launcher == "torchrun":
        hits += _torchrun(launch, env)
    elif launch.launcher == "accelerate":
        n = _int(launch.option("--num_processes", "--num-processes"))
        if n == 1:
            hits.append(("D5", "accelerate-one-process", "warning",
                         "--num_processes 1 starts one process whatever the GPUs; give the number of GPUs"))
    elif launch.launcher == "deepspeed":
        nodes = _int(launch.option("--num_nodes", "--num-nodes"))
        hostfile = launch.option("--hostfile", "-H")
        if nodes and nodes > 1 and hostfile is None:
            hits.append(("D6", "deepspeed-nodes-without-hostfile", "warning",
                         f"--num_nodes {nodes} without --hostfile: the launcher reads /job/hostfile, and without "
                         "one it starts only this node"))
    elif launch.launcher == "python" and not launch.wrapper and not launch.module:
        message = ("a plain `python` start runs one process with no RANK, WORLD_SIZE or MASTER_ADDR set; a "
                   "distributed script needs torchrun, accelerate launch or srun to start one per GPU")
        hits.append(("D1", "no-launcher", "warning", message))
        hits.append(("D5", "no-launcher", "warning", message))
    hits += _literal_local_rank(launch)
    if read_script is not None:
        hits += _restarts(launch, read_script)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    per_node = _int(launch.option("--nproc-per-node", "--nproc_per_node", "--num_gpus", "--num-gpus"))
    if visible is not None and per_node and launch.launcher in ("torchrun", "deepspeed"):
        count = len([d for d in visible.split(",") if d.strip()])
        if per_node > count:
            hits.append(("D27", "more-ranks-than-visible-gpus", "error",
                         f"{per_node} processes per node but CUDA_VISIBLE_DEVICES={visible} shows {count} GPU(s)"))
    return [LintFinding(COMMAND, 1, 0, entry, rule, severity, message) for entry, rule, severity, message in hits]


def with_command(result, cmd: str, select=(), ignore=(), read_script=None):
    """A lint result with the launch command's findings added, filtered by select / ignore like the scripts'; a
    command that cannot be parsed is named among the errors, and the scripts' findings stay."""
    from dataclasses import replace

    from gpudoctor.engine.fixes.errors import FixError
    from gpudoctor.engine.lint.runner import _norm

    try:
        found = check_command(cmd, read_script)
    except FixError as exc:  # like an unreadable file: named, and the scripts are still linted
        return replace(result, errors=tuple(result.errors) + (("launch command", str(exc)),))
    select, ignore = _norm(select), _norm(ignore)  # the scripts' own reading of the two lists

    def keep(f) -> bool:
        keys = {f.entry_id, f.rule}
        return (not select or bool(keys & select)) and not keys & ignore

    return replace(result, findings=tuple(result.findings) + tuple(f for f in found if keep(f)))


def script_reader(paths=(), base: str = "."):
    """`read_script` for check_command: the named script relative to `base`, else a linted file of the same name;
    None when neither is a readable file (a script on another machine is no finding)."""
    import os

    def read(name: str) -> str | None:
        candidates = [os.path.join(base, name)]
        candidates += [p for p in paths if os.path.basename(p) == os.path.basename(name)]
        for path in candidates:
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    return fh.read(4 << 20)
            except OSError:
                continue
        return None

    return read


def _restarts(launch, read_script) -> list[tuple[str, str, str, str]]:
    """MN5: torchrun --max-restarts above 0 with a training script that loads no checkpoint."""
    from gpudoctor.engine.lint.checks.mn5_restarts_without_resume import loads_checkpoint, restart_message

    restarts = launch.option("--max-restarts", "--max_restarts")
    if launch.launcher != "torchrun" or launch.module or not (_int(restarts) or 0) > 0:
        return []
    body = read_script(launch.script)
    if body is None or loads_checkpoint(body):
        return []
    return [("MN5", "restarts-without-resume", "warning", restart_message(restarts, launch.script))]


def _torchrun(launch, env: dict) -> list[tuple[str, str, str, str]]:
    hits = []
    nodes = _max_nodes(launch.option("--nnodes"))
    if not nodes or nodes < 2:
        return hits
    if launch.option("--standalone") is not None:
        hits.append(("D2", "standalone-multinode", "error",
                     f"--standalone with --nnodes {nodes}: each node makes its own rendezvous on localhost and "
                     "waits for nodes that never come"))
        return hits
    endpoint = launch.option("--rdzv-endpoint", "--rdzv_endpoint")
    master = launch.option("--master-addr", "--master_addr") or env.get("MASTER_ADDR")
    host = (endpoint.rsplit(":", 1)[0].strip("[]") if endpoint else master) or ""
    if host.lower() in _LOCAL_HOSTS:
        hits.append(("D2", "local-rendezvous-multinode", "error",
                     f"--nnodes {nodes} with the rendezvous on {host}: every node meets only itself"))
    elif not host:
        hits.append(("D2", "multinode-without-rendezvous", "warning",
                     f"--nnodes {nodes} without --rdzv-endpoint or --master-addr: each node defaults to its own "
                     "localhost and the nodes never meet"))
    return hits


def literal_local_rank_message(launch) -> str | None:
    """What is wrong with a literal --local_rank N the launch hands every worker (Launch.literal_local_rank), or None."""
    at = launch.literal_local_rank()
    if at is None:
        return None
    given = " ".join(launch.args[at[0]:at[1]])
    value = given.replace("=", " ").split()[-1]
    how = "torch.distributed.launch --use_env" if launch.legacy else "torchrun"
    return (f"`{given}` is given to every worker: {how} passes no --local_rank of its own, so each process reads "
            f"{value} and picks the same GPU; drop it and read LOCAL_RANK from the environment")


def _literal_local_rank(launch) -> list[tuple[str, str, str, str]]:
    message = literal_local_rank_message(launch)
    return [("D3", "literal-local-rank", "error", message)] if message else []


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() else None


def _max_nodes(value: str | None) -> int | None:
    """--nnodes N or MIN:MAX (elastic): the most nodes the job may have."""
    if value is None:
        return None
    parts = re.findall(r"\d+", value)
    return max(int(p) for p in parts) if parts else None
