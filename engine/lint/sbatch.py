"""What a SLURM batch script asks for (its #SBATCH directives) and the commands it runs, for the launch checks.

A batch script runs once, on the first node of the allocation; only what it starts with srun (or mpirun, or a
launcher that reaches the other nodes itself) runs on every node. The checks that read launch scripts need three
facts: how many nodes the job has, how many tasks srun puts on each, and which command lines start a distributed
launcher, with or without srun in front.
"""
from __future__ import annotations

import re
import shlex

__all__ = ["Command", "assignments", "commands", "directives", "nodes_of", "tasks_per_node_of", "LAUNCHERS"]

# launchers that start the workers of one node and expect one copy of themselves per node
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate launch")
# what starts a command on every node (or on the nodes it is given) instead of on this one
SPREADERS = ("srun", "mpirun", "mpiexec", "pdsh", "clush", "pssh", "parallel-ssh", "ssh", "jsrun", "flux")
_DIRECTIVE = re.compile(r"^#SBATCH\s+(.*)$")
_ASSIGN = re.compile(r"(?:^|\s)(?:export\s+)?([A-Z_][A-Z0-9_]*)=(\S*)")


class Command:
    """One logical command line (continuation lines joined), its 1-based first and last line, and its words."""

    def __init__(self, first: int, last: int, code: str):
        self.first, self.last, self.code = first, last, code
        try:
            self.words = shlex.split(code, posix=True)
        except ValueError:  # an unbalanced quote: good enough for finding words
            self.words = code.split()

    def launcher(self) -> str | None:
        """The distributed launcher this line starts, if any."""
        joined = " ".join(self.words)
        for name in LAUNCHERS:
            if re.search(rf"(?:^|[\s/]){re.escape(name)}(?:\s|$)", joined):
                return name
        return None

    def spreader(self) -> str | None:
        """srun, mpirun ... when one of them comes before the launcher on this line."""
        for word in self.words:
            base = word.rsplit("/", 1)[-1]
            if base in SPREADERS:
                return base
            if any(name.split()[0] in word for name in LAUNCHERS) or base in ("python", "python3"):
                return None
        return None

    def option(self, *names: str) -> str | None:
        """The value of the first of these options on the line (--opt=v, --opt v, -N2, -N 2)."""
        for i, word in enumerate(self.words):
            for name in names:
                if word == name and i + 1 < len(self.words):
                    return self.words[i + 1]
                if word.startswith(name + "=") or (len(name) == 2 and word.startswith(name) and len(word) > 2):
                    return word[len(name) + (1 if word.startswith(name + "=") else 0):]
        return None

    def column(self, lines: list[str], needle: str) -> tuple[int, int]:
        for n in range(self.first - 1, self.last):
            col = lines[n].find(needle)
            if col >= 0:
                return n + 1, col
        return self.first, 0


def commands(text: str) -> list[Command]:
    """The script's command lines, comments and blank lines left out."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        start, logical = i, lines[i]
        while logical.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            logical = logical.rstrip()[:-1] + " " + lines[i]
        i += 1
        code = logical.split(" #", 1)[0].strip()
        if code and not code.startswith("#"):
            out.append(Command(start + 1, i, code))
    return out


def directives(text: str) -> list[tuple[int, list[str]]]:
    """(line, words) of each #SBATCH directive; sbatch reads them until the first command line."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        m = _DIRECTIVE.match(stripped)
        if m:
            try:
                found.append((n, shlex.split(m.group(1).split(" #", 1)[0])))
            except ValueError:
                found.append((n, m.group(1).split()))
        elif stripped and not stripped.startswith("#"):
            break
    return found


def _count(value: str | None) -> int | None:
    """'4' or '2-4' (a range: its least) as a count."""
    if not value:
        return None
    m = re.match(r"(\d+)", value)
    return int(m.group(1)) if m else None


def _directive(text: str, *names: str) -> tuple[int | None, int | None]:
    """(value, line) of the last #SBATCH directive giving one of the options."""
    value = line = None
    for n, words in directives(text):
        got = Command(n, n, " ".join(shlex.quote(w) for w in words)).option(*names)
        if got is not None:
            value, line = _count(got), n
    return value, line


def nodes_of(text: str) -> tuple[int | None, int | None]:
    """(nodes the job asks for, the directive's line)."""
    return _directive(text, "--nodes", "-N")


def tasks_per_node_of(text: str, command: Command | None = None) -> int | None:
    """Tasks srun starts per node for this command: its own --ntasks-per-node, else the #SBATCH one."""
    if command is not None:
        own = _count(command.option("--ntasks-per-node"))
        if own is not None:
            return own
    return _directive(text, "--ntasks-per-node")[0]


def assignments(text: str) -> dict[str, tuple[str, int]]:
    """NAME -> (value, line) of variables the script sets (VAR=x, export VAR=x), the last one winning."""
    out = {}
    for command in commands(text):
        for m in _ASSIGN.finditer(command.code):
            out[m.group(1)] = (m.group(2).strip("'\""), command.first)
    return out
