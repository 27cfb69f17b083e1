"""MN5: a launch script asks torchrun to restart workers, but the training script never loads a checkpoint."""
from __future__ import annotations

import os
import re
import shlex

from gpudoctor.engine.lint.model import Check, Hit

RESTARTS = re.compile(r"--max[-_]restarts(?:=|\s+)(\d+)")
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
LOADS = ("torch.load", "load_state_dict", "load_checkpoint", "dcp.load", "checkpoint.load", "load_state(",
         "resume", "from_pretrained", "fabric.load")


def loads_checkpoint(body: str) -> bool:
    """Whether a training script's text shows any way of loading a checkpoint or resuming."""
    return any(word in body for word in LOADS)


def restart_message(restarts: str, target: str) -> str:
    return (f"--max-restarts={restarts} restarts {target} from scratch: it loads no checkpoint, so every restart "
            "trains from step 0; save periodically and load the latest checkpoint at start")


class RestartsWithoutResume(Check):
    code = "MN5"
    slug = "restarts-without-resume"
    severity = "warning"
    summary = "torchrun --max-restarts with a training script that loads no checkpoint: restarts begin at step 0"
    languages = ("shell",)

    def find(self, script):
        lines = script.text.splitlines()
        i = 0
        while i < len(lines):
            start = i
            logical = lines[i]
            while logical.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                logical = logical.rstrip()[:-1] + " " + lines[i]
            i += 1
            code = logical.split("#", 1)[0]
            m = RESTARTS.search(code)
            if not m or int(m.group(1)) == 0 or not any(word in code for word in LAUNCHERS):
                continue
            target = _training_script(code)
            if target is None:
                continue
            path = os.path.join(os.path.dirname(os.path.abspath(script.path)), target)
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    body = fh.read()
            except OSError:
                continue
            if loads_checkpoint(body):
                continue
            line, col = _locate(lines, start, i, "max")
            yield Hit(line, col, restart_message(m.group(1), target))


def _training_script(code: str) -> str | None:
    try:
        words = shlex.split(code, posix=True)
    except ValueError:
        words = code.split()
    return next((w for w in words if w.endswith(".py")), None)


def _locate(lines, first, end, needle) -> tuple[int, int]:
    for n in range(first, end):
        col = lines[n].find("--" + needle)
        if col >= 0:
            return n + 1, col
    return first + 1, 0
