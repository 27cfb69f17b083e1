"""What the launch tells, read from the command the log echoes or the launcher's own frames.

- A literal --local_rank N written into the script's arguments under torchrun (or torch.distributed.launch
  --use_env), which pass no local rank of their own, gives every worker the same N, and a script that picks its GPU
  from it puts every rank on one GPU (D3). Swin Transformer #158: `python -m torch.distributed.launch
  --nproc_per_node=4 --use_env ... main.py --local_rank 0` sat at "Start training" with all four on GPU 0.
- CUDA_VISIBLE_DEVICES listing fewer GPUs than the --nproc_per_node on the same command line: more processes per
  node than GPUs it can see (D27), whoever starts them (a launcher, or a script that spawns its own).
- accelerate's simple_launcher runs one process; when that process died by SIGKILL, the host ran out of memory for
  one process, not for a copy per rank (D28 ruled out)."""
from __future__ import annotations

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import INVALID_ORDINAL, Verdict

# cheap test first: a launcher and a literal local rank somewhere in the text (commands wrap with a backslash)
_TRIGGER = _lazy(r"(?:\btorchrun\b|torch\.distributed\.(?:launch|run)\b)[\s\S]{0,800}?--local[_-]rank[= ]+\d")
_START = _lazy(r"(?:\b[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?(?:python[\d.]*|torchrun)\s")
SCORE = 0.65
_VISIBLE = _lazy(r"\bCUDA_VISIBLE_DEVICES=['\"]?(\d+(?:,\d+)*)['\"]?\s.*?--nproc[_-]per[_-]node[= ]+(\d+)\b")
VISIBLE_SCORE = 0.6
EXPLAINED_SCORE = 0.95  # the launch line explains the failure the log ends in: ahead of D3's reading of that failure
_ONE_PROCESS_KILLED = _lazy(r"in simple_launcher\b[\s\S]{0,600}?died with <Signals\.SIGKILL: 9>")


def literal_local_rank_rule(text: str, file: str) -> list:
    if "rank" not in text or not ("torchrun" in text or "torch.distributed." in text) or not _TRIGGER.search(text):
        return []  # (plain substring tests first: most logs never compile the pattern)
    from gpudoctor.engine.fixes.errors import FixError
    from gpudoctor.engine.fixes.launch import parse_launch
    from gpudoctor.engine.lint.sbatch import commands  # continuation lines joined, as in a launch script

    for command in commands(text):
        m = _START.search(command.code) if "torchrun" in command.code or "torch.distributed." in command.code else None
        if m is None:
            continue
        line_no = command.first
        try:
            launch = parse_launch(command.code[m.start():])
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


def visible_devices_rule(text: str, file: str) -> list:
    """D27 when a command the log shows gives fewer GPUs in CUDA_VISIBLE_DEVICES than processes per node."""
    if "CUDA_VISIBLE_DEVICES" not in text:
        return []
    for line_no, line in enumerate(text.splitlines(), 1):
        m = _VISIBLE.search(line)
        if m is None:
            continue
        gpus, nproc = len(m.group(1).split(",")), int(m.group(2))
        if nproc > gpus:
            here = Evidence(file, line_no, line, "rule:nproc-above-visible-gpus")
            note = (f"line {line_no}: {nproc} processes per node but CUDA_VISIBLE_DEVICES={m.group(1)} shows "
                    f"{gpus} GPU{'s' if gpus > 1 else ''}")
            # with fewer GPUs than ranks, some ranks share a device or index past the last one whatever the script
            # picks its GPU by: the duplicate-GPU or ordinal error that follows is this, not a RANK/LOCAL_RANK slip
            explained = "Duplicate GPU detected" in text or INVALID_ORDINAL.search(text)
            score = EXPLAINED_SCORE if explained else VISIBLE_SCORE
            return [Verdict("D27", "rule:nproc-above-visible-gpus", (here,), score=score, note=note)]
    return []


def one_process_killed_rule(text: str, file: str) -> list:
    """D28 ruled out when the process accelerate's simple_launcher started (its one process) died by SIGKILL."""
    m = _ONE_PROCESS_KILLED.search(text) if "simple_launcher" in text else None
    if m is None:
        return []
    line_no = text.count("\n", 0, m.end()) + 1
    here = Evidence(file, line_no, text.splitlines()[line_no - 1], "rule:one-process-killed")
    note = (f"not D28: line {line_no} is accelerate's simple_launcher, which starts one process; the host ran out of "
            "memory (or a kill -9 came) for that one process, not for a copy of the model per rank")
    return [Verdict("D28", "rule:one-process-killed", (here,), rule_out=True, note=note)]
