"""D2: a SLURM batch script of several nodes starts the launcher itself, so it runs on the first node only; or it
points the rendezvous at localhost."""
from __future__ import annotations

from gpudoctor.engine.lint.model import Check, Hit
from gpudoctor.engine.lint.sbatch import assignments, commands, nodes_of

_LOCAL = ("localhost", "127.0.0.1", "0.0.0.0", "::1")


class BatchScriptOnOneNode(Check):
    code = "D2"
    slug = "rendezvous-on-one-node"
    severity = "error"
    summary = ("a multi-node SLURM batch script runs torchrun/accelerate without srun, or sets MASTER_ADDR to "
               "localhost: only the first node joins")
    languages = ("shell",)

    def find(self, script):
        nodes, nodes_line = nodes_of(script.text)
        if not nodes or nodes < 2:
            return
        lines = script.text.splitlines()
        for command in commands(script.text):
            launcher = command.launcher()
            if launcher is None:
                continue
            if _single_node(command):  # asked for one node on purpose (an eval, a tokenizer pass)
                continue
            endpoint = command.option("--rdzv-endpoint", "--rdzv_endpoint", "--master-addr", "--master_addr",
                                      "--main_process_ip", "--main-process-ip")
            host = (endpoint or "").rsplit(":", 1)[0].strip("[]") if endpoint and endpoint.count(":") <= 1 else endpoint
            if host and host.lower() in _LOCAL:
                line, col = command.column(lines, endpoint)
                yield Hit(line, col,
                          f"{launcher} meets at {endpoint} in a {nodes}-node job: each node's workers meet at their "
                          "own localhost and never find the others; give the first node's hostname")
            if command.spreader() is not None:
                continue
            line, col = command.column(lines, launcher.split()[0].split(".")[0])
            yield Hit(line, col,
                      f"{launcher} runs in the batch script, which SLURM runs on the first of the job's {nodes} "
                      f"nodes (line {nodes_line}) only: the other nodes start nothing and the rendezvous waits for "
                      f"them; start it on every node with `srun --ntasks-per-node=1 {launcher} ...`")
        for name, (value, line) in assignments(script.text).items():
            if name == "MASTER_ADDR" and value.lower() in _LOCAL:
                yield Hit(line, max(0, lines[line - 1].find(name)),
                          f"MASTER_ADDR={value} in a {nodes}-node job: each node's ranks meet at their own "
                          "localhost and never find the others; use the first node's hostname, e.g. "
                          "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)")


def _single_node(command) -> bool:
    if "--standalone" in command.words:
        return True
    count = command.option("--nnodes", "--num_machines", "--num-machines")
    return count is not None and count.split(":")[0] == "1"
