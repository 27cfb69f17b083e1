"""A launch command the log echoes, read as `gpudoctor lint --cmd` reads one: a literal --local_rank N written into
the script's arguments under torchrun (or torch.distributed.launch --use_env), which pass no local rank of their own,
gives every worker the same N, and a script that picks its GPU from it puts every rank on one GPU (D3).

Swin Transformer #158: `python -m torch.distributed.launch --nproc_per_node=4 --use_env ... main.py --local_rank 0`
sat at "Start training" with all four processes on GPU 0."""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import Verdict

# cheap test first: a launcher and a literal local rank somewhere in the text (commands wrap with a backslash)
_TRIGGER = _lazy(r"(?:\btorchrun\b|torch\.distributed\.(?:launch|run)\b)[\s\S]{0,800}?--local[_-]rank[= ]+\d")
_START = _lazy(r"(?:\b[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?(?:python[\d.]*|torchrun)\s")
SCORE = 0.65


def _commands(lines: list[str]):
    """(line number, command) for each echoed launch, continuation lines (a trailing backslash) joined."""
    i = 0
    while i < len(lines):
        first, text = i, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        if "torchrun" in text or "torch.distributed." in text:
            m = _START.search(text)
            if m is not None:
                yield first + 1, text[m.start():]


def literal_local_rank_rule(text: str, file: str) -> list:
    if not _TRIGGER.search(text):
        return []
    from gpudoctor.engine.fixes.errors import FixError
    from gpudoctor.engine.fixes.launch import parse_launch

    for line_no, cmd in _commands(text.splitlines()):
        try:
            launch = parse_launch(cmd)
        except FixError:
            continue
        at = launch.literal_local_rank()
        if at is None:
            continue
        given = " ".join(launch.args[at[0]:at[1]])
        here = Evidence(file, line_no, text.splitlines()[line_no - 1], "rule:literal-local-rank")
        note = (f"line {line_no}: `{given}` reaches every worker unchanged (the launcher passes no --local_rank of "
                "its own), so a script that picks its GPU from it puts every rank on one GPU")
        return [Verdict("D3", "rule:literal-local-rank", (here,), score=SCORE, note=note)]
    return []
