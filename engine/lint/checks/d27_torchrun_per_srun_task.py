"""D27: srun starts several tasks per node and each one runs torchrun, which starts its own workers for the same
GPUs."""
from __future__ import annotations

from gpudoctor.engine.lint.model import Check, Hit
from gpudoctor.engine.lint.sbatch import commands, tasks_per_node_of


class TorchrunPerSrunTask(Check):
    code = "D27"
    slug = "launcher-per-srun-task"
    severity = "error"
    summary = "srun --ntasks-per-node > 1 in front of torchrun/accelerate: each task starts workers for every GPU"
    languages = ("shell",)

    def find(self, script):
        lines = script.text.splitlines()
        for command in commands(script.text):
            launcher = command.launcher()
            if launcher is None or command.spreader() != "srun":
                continue
            per_node = tasks_per_node_of(script.text, command)
            if per_node is None or per_node < 2:
                continue
            line, col = command.column(lines, "srun")
            yield Hit(line, col,
                      f"srun starts {per_node} tasks per node and each runs {launcher}, which starts its own workers "
                      f"for the node's GPUs: {per_node}x the processes, several per GPU; use --ntasks-per-node=1 "
                      f"with {launcher} (it starts one worker per GPU), or srun one task per GPU without {launcher}")
