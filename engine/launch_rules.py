"""What the launch tells, read from the command the log echoes or the launcher's own frames.

- A literal --local_rank N written into the script's arguments under torchrun (or torch.distributed.launch
  --use_env), which pass no local rank of their own, gives every worker the same N, and a script that picks its GPU
  from it puts every rank on one GPU (D3). Swin Transformer #158: `python -m torch.distributed.launch
  --nproc_per_node=4 --use_env ... main.py --local_rank 0` sat at "Start training" with all four on GPU 0.
- torch 2.x's torch.distributed.launch hands each worker the dashed --local-rank=N; a script whose argparse usage offers
  only --local_rank (or no such option) rejects it and never starts (D1's "unrecognized arguments: --local-rank=0").
- CUDA_VISIBLE_DEVICES listing fewer GPUs than the --nproc_per_node on the same command line: more processes per
  node than GPUs it can see (D27), whoever starts them (a launcher, or a script that spawns its own).
- accelerate's simple_launcher runs one process; when that process died by SIGKILL, the host ran out of memory for
  one process, not for a copy per rank (D28 ruled out).
- The DeepSpeed launcher tearing the job down (its sigkill_handler killing the other ranks once one has ended) in
  a log where no rank printed an error: the rank that ended said nothing, as a process killed by a signal does, and
  the usual sender is the host's OOM killer (a possible D28); when the ranks' last lines are the model loading, before
  any training step, it is the copy of the model each rank holds in host memory (D28).
- A rank that lost its peer inside a training step's collective (the DDP backward, an all-reduce) while torchrun's
  failure summary shows that peer failing in no way of its own (not listed, stopped by the agent's SIGTERM, or aborted
  in its teardown): the peer ended its loop while the step still waited for it, so it ran out of batches first (D9,
  the uneven shards' hang, as a real gloo run shows it in its three endings). When the rank waited in an explicit
  collective of the script instead (a barrier after the loop), only some ranks called it: a D21 guess, which the
  script's own lint line confirms."""
from __future__ import annotations

import re

from gpudoctor.engine.findings import Evidence
from gpudoctor.engine.lazyregex import LazyRegex as _lazy
from gpudoctor.engine.rules import INVALID_ORDINAL, Verdict
from gpudoctor.engine.textfind import line_at

# cheap test first: a launcher and a literal local rank somewhere in the text (commands wrap with a backslash)
_TRIGGER = _lazy(r"(?:\btorchrun\b|torch\.distributed\.(?:launch|run)\b)[\s\S]{0,800}?--local[_-]rank[= ]+\d")
_START = _lazy(r"(?:\b[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?(?:python[\d.]*|torchrun)\s")
SCORE = 0.65
_VISIBLE = _lazy(r"\bCUDA_VISIBLE_DEVICES=['\"]?(\d+(?:,\d+)*)['\"]?\s.*?--nproc[_-]per[_-]node[= ]+(\d+)\b")
VISIBLE_SCORE = 0.6
EXPLAINED_SCORE = 0.95  # the launch line explains the failure the log ends in: ahead of D3's reading of that failure
_ONE_PROCESS_KILLED = _lazy(r"in simple_launcher\b[\s\S]{0,600}?died with <Signals\.SIGKILL: 9>")
# deepspeed/launcher/launch.py sigkill_handler (0.3-0.16): logger.info(f"Killing subprocess {process.pid}") for every
# rank, then logger.error(f"{cmd} exits with return code = {last_return_code}")
_TEARDOWN = _lazy(r"sigkill_handler\W[^\n]{0,80}?Killing subprocess \d+")  # (bounded: the prefix sits just before)
_RETURN_CODE = _lazy(r"exits with return code = (-?\d+)")
_RAISED = _lazy(r"Traceback \(most recent call last\)|^\W*(?:\w+\.)*\w*(?:Error|Exception)\b|\bError: ", re.MULTILINE)
SILENT_TEARDOWN_SCORE = 0.5
# what a rank prints while it loads or builds the model or resumes its states, before any step: transformers'
# modeling_utils ("loading weights file %s", the "Loading checkpoint shards" progress bar), peft's
# print_trainable_parameters ("trainable params: %d || all params: %d"), Megatron's and SwissArmyTransformer's
# " > number of parameters on (tensor) model parallel rank %d" and "building %s model ...", a resume: the Trainer's
# "Loading model from %s." and DeepSpeed integration's "Attempting to resume from %s" (transformers 4.2x-4.4x),
# DeepSpeed's engine "successfully read %d ZeRO state_dicts for rank %d" (0.5-0.16), accelerate's "Loading states
# from %s" (0.1x-1.x)
_LOADING = _lazy(r"loading weights file|Loading checkpoint shards|trainable params: [\d,]+ \|\| all params|"
                 r"number of parameters on (?:\w+ )?model parallel rank|\bbuilding \w+ model\b|"
                 r"Loading model from \S|Attempting to resume from \S|successfully read \d+ ZeRO state_dicts|"
                 r"Loading states from \S", re.IGNORECASE)
# a training step under way: a loss, a step or iteration count, a progress bar's rate
_STEPPING = _lazy(r"\bloss\b|\b(?:global_)?step\W{0,3}\d|\biter(?:ation)?\W{0,3}\d|\d(?:it/s|s/it)\b|\bepoch\W{0,3}\d",
                  re.IGNORECASE)
LOADING_WINDOW = 20  # lines before the teardown in which the model was still loading
KILLED_LOADING_SCORE = 0.6


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


# torch.distributed.launch from torch 2.0 passes the dashed --local-rank=N to the script (unless --use-env) and says so
# in its deprecation warning (torch/distributed/launch.py: "If your script expects `--local-rank` argument to be set");
# 1.x wrote `--local_rank` there and passed the underscored form
_DASHED_LAUNCH = _lazy(r"If your script expects `--local-rank` argument to be set")
_USE_ENV = _lazy(r"--use[-_]env\b(?! is set by default)")  # given on the command line, not the warning's aside
# argparse prints its usage on a parse error ("usage: %(prog)s [-h] ..."), wrapped onto indented lines
_USAGE = _lazy(r"^[ \t]*usage: \S+(?: \[?-[^\n]*)?(?:\n[ \t]{4,}[^\n]+)*", re.MULTILINE)
_PARSE_ERROR = _lazy(r"^\S+: error: [^\n]*", re.MULTILINE)  # argparse: "%(prog)s: error: %(message)s"
DASHED_SCORE = 0.7


def dashed_local_rank_rule(text: str, file: str) -> list:
    """D1 when torch 2.x's torch.distributed.launch, which hands each worker --local-rank=N, starts a script whose
    argparse usage offers no --local-rank (at most the underscored --local_rank, a different option to argparse): the
    script rejects its launcher's argument ("unrecognized arguments: --local-rank=0") and never reads its rank."""
    if "--local-rank" not in text or "usage:" not in text:
        return []
    launch = _DASHED_LAUNCH.search(text)
    if launch is None or _USE_ENV.search(text):
        return []
    usage = next((m for m in _USAGE.finditer(text) if "--local-rank" not in m.group(0)), None)
    if usage is None or any("--local-rank" not in m.group(0) for m in _PARSE_ERROR.finditer(text)):
        return []  # (argparse's own error line, where the log shows it, names what it refused: another option)
    line_no, line = line_at(text, usage.start())
    offers = "only --local_rank" if "--local_rank" in usage.group(0) else "no local-rank option"
    here = Evidence(file, line_no, line, "rule:script-rejects-dashed-local-rank")
    why = Evidence(file, line_at(text, launch.start())[0],
                   f"torch.distributed.launch (torch 2.x) passes --local-rank=N to each worker, and the script's usage "
                   f"offers {offers}: argparse rejects the launcher's argument", "because")
    return [Verdict("D1", "rule:script-rejects-dashed-local-rank", (here, why), score=DASHED_SCORE)]


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
    line_no, line = line_at(text, m.end())
    here = Evidence(file, line_no, line, "rule:one-process-killed")
    note = (f"not D28: line {line_no} is accelerate's simple_launcher, which starts one process; the host ran out of "
            "memory (or a kill -9 came) for that one process, not for a copy of the model per rank")
    return [Verdict("D28", "rule:one-process-killed", (here,), rule_out=True, note=note)]


# torch/distributed/elastic: the agent's "Received 2 death signal, shutting down workers" and the SignalException it
# raises after ("Process 123 got signal: 2"); a worker that outlives SIGINT is then sent SIGKILL by the agent itself
# ("Unable to shutdown process 456 via 2, forcefully exiting via 9")
_BY_HAND = _lazy(r"Received 2 death signal|SignalException: Process \d+ got signal: 2\b|"
                 r"Unable to shutdown process \d+ via (?:2|Signals\.SIGINT), forcefully exiting via")


# a run that ended as it should, in the launchers' and trainers' own words: DeepSpeed's launcher (launch.py, 0.3+)
# `Process {pid} exits successfully.`, HF Trainer's `Training completed. Do not forget to share your model ...` and
# its speed metrics ('train_runtime': ...), Lightning 2.x's fit loop `Trainer.fit` stopped: `max_epochs=N` reached.
_FINISHED = _lazy(r"Process \d+ exits successfully\.|Training completed\. Do not forget to share your model|"
                  r"'train_runtime': [\d.]+|`Trainer\.fit` stopped: `max_(?:epochs|steps)=\d+` reached\.")


def run_finished(text: str) -> tuple[int, str] | None:
    """(line number, the words that say so) of the last sign in text that the run finished as it should, or None."""
    last = None
    for last in _FINISHED.finditer(text):
        pass
    return None if last is None else (line_at(text, last.start())[0], last.group(0))


def stopped_by_hand(text: str) -> bool:
    """torchrun's agent was stopped with Ctrl-C (SIGINT) in this text."""
    return "signal" in text and _BY_HAND.search(text) is not None


def interrupted_by_hand_rule(text: str, file: str) -> list:
    """D28 ruled out when torchrun was stopped with Ctrl-C (SIGINT): its workers' SIGKILL is the agent's own escalation
    after the interrupt, not the host's OOM killer."""
    if "signal" not in text:
        return []
    m = _BY_HAND.search(text)
    if m is None:
        return []
    line_no, line = line_at(text, m.start())
    note = (f"line {line_no}: the launcher was stopped by hand (Ctrl-C, SIGINT); a worker it then killed with SIGKILL "
            "was its own escalation, not the host running out of memory (not D28); what the ranks were doing when "
            "stopped (a hang?) is the failure to read: while a job hangs, `gpudoctor stacks` shows where each rank "
            "is stopped")
    return [Verdict("D28", "rule:interrupted-by-hand", (Evidence(file, line_no, line, "rule:interrupted-by-hand"),),
                    rule_out=True, note=note)]


def silent_teardown_rule(text: str, file: str) -> list:
    """D28 when the DeepSpeed launcher killed the ranks after one ended and no rank printed an error: confident when
    the ranks were last loading the model, a possible cause otherwise."""
    if "Killing subprocess" not in text:
        return []
    m = _TEARDOWN.search(text)
    if m is None or _RAISED.search(text):
        return []
    codes = {int(c) for c in _RETURN_CODE.findall(text)}
    if any(code > 0 for code in codes):
        return []  # a rank exited with an error code of its own: it was not killed
    if any(code < 0 and code != -9 for code in codes):
        return []  # a signal other than SIGKILL (a bus error, a segfault): not the OOM killer
    line_no, line = line_at(text, m.start())
    # the last lines before the teardown's (split from the end: a 4 MiB log is not split whole for twenty lines)
    before = text[:m.start()].rsplit("\n", LOADING_WINDOW + 1)[:-1]
    loading = _loading_line(before, line_no - len(before))
    if loading is not None:
        rule = "rule:killed-while-loading-the-model"
        here = Evidence(file, line_no, line, rule)
        why = Evidence(file, loading[0], "no rank printed an error, and the last thing the ranks did was load the "
                                         f"model ({loading[1]}): every rank holds its copy in host memory "
                                         "then, and the host's OOM killer ends one without a word", "because")
        return [Verdict("D28", rule, (here, why), score=KILLED_LOADING_SCORE)]
    here = Evidence(file, line_no, line, "hint:silent-rank-teardown")
    why = Evidence(file, line_no, "the DeepSpeed launcher killed the ranks after one ended, and no rank printed an "
                                  "error: a rank that dies without a word was killed by a signal, most often the "
                                  "host's OOM killer", "because")
    return [Verdict("D28", "hint:silent-rank-teardown", (here, why), score=SILENT_TEARDOWN_SCORE, tier="possible")]


def _loading_line(before: list[str], first_no: int) -> tuple[int, str] | None:
    """The last model-loading line among the lines just before the teardown, when no training step came after it."""
    start = max(0, len(before) - LOADING_WINDOW)
    for i in range(len(before) - 1, start - 1, -1):
        if _STEPPING.search(before[i]) and not _LOADING.search(before[i]):  # a shard bar has a rate too
            return None
        if _LOADING.search(before[i]):
            from gpudoctor.engine.prefix import parse_prefix

            body = " ".join(parse_prefix(before[i]).body.split())
            return first_no + i, body if len(body) <= 90 else body[:89] + "…"
    return None


# torch/distributed/elastic/multiprocessing/errors/__init__.py ChildFailedError.format_msg (torch 1.9-2.x): after
# "Failures:", each other failed rank or "<NO_OTHER_FAILURES>", then "Root Cause (first observed failure):", each with
# "rank      : 0 (local_rank: 0)" and "exitcode  : 1 (pid: 8652)"
# the rank's peer went away: gloo's pair ("Connection closed by peer", "Connection reset by peer"), NCCL's remote error
_LOST_PEER = _lazy(r"Connection closed by peer|Connection reset by peer|ncclRemoteError|remote process exited")
# a training step's collectives: the DDP gradient all-reduce under backward, an explicit all-reduce
_IN_STEP = _lazy(r"\bin (?:backward|_engine_run_backward|run_backward|all_reduce|allreduce)\b|\.backward\(\)")
# each failure of the summary: "rank      : 1 (local_rank: 1)" then "exitcode  : -6 (pid: 11164)"
_FAILED = _lazy(r"rank\s*:\s*(\d+)[^\n]{0,40}\n\s*exitcode\s*:\s*(-?\d+)")
_RANK_PREFIX = _lazy(r"\[(?:rank)?(\d+)\]:")
SUMMARY_CHARS = 20_000  # torchrun's failure summary: a few lines per failed rank
# an exception line, with or without a rank prefix; the launcher's own ChildFailedError and signal reports are not a
# rank's error
_ERROR_LINE = _lazy(r"^\W*(?:\[(?:rank|default)?\d+\]:\s*)?(?:[\w.]+\.)?\w*(?:Error|Exception)\b(?::|$)")
_TEARDOWN_ERROR = _lazy(r"ChildFailedError|SignalException|DistBackendError|DistNetworkError")
# an explicit collective a traceback shows the rank in (torch.distributed's function names)
_EXPLICIT = _lazy(r"\bin (barrier|monitored_barrier|broadcast|all_gather|all_gather_object|gather|reduce|scatter|"
                  r"all_to_all|broadcast_object_list|gather_object|reduce_scatter)\b")
PEER_EXITED_SCORE = 0.6
# a rank's own print that it skipped a step on a NaN/inf loss ("loss is nan, skipping batch", "Skipping step: inf
# loss"): that rank ran one collective fewer, so it ended while the others still waited in the step it skipped (D20's
# skip-this-step decision made on one rank alone, not uneven data)
_SKIPPED_STEP = _lazy(r"(?i)\b(?:nan|inf|non-?finite|not finite)\b[^\n]{0,60}\bskip(?:s|ped|ping)?\b|"
                      r"\bskip(?:s|ped|ping)?\b[^\n]{0,60}\b(?:nan|inf|non-?finite|not finite)\b")
STEP_WINDOW = 12  # frame lines above the lost-peer error that tell it was inside a step


def peer_exited_cleanly_rule(text: str, file: str) -> list:
    """D9 when a rank lost its peer inside a step and torchrun's summary shows that peer failed in no way of its own:
    it ended with exit code 0 (not listed), was stopped by the agent's SIGTERM, or aborted in its teardown
    ("terminate called without an active exception": gloo's threads at exit, after the loop had ended). A D21 guess
    when the rank was waiting in an explicit collective outside a step (a barrier only rank 0 reaches)."""
    if "Root Cause" not in text or "Failures:" not in text:
        return []
    start = text.find("Failures:")
    summary = text[start: start + SUMMARY_CHARS]
    codes = {rank: int(code) for rank, code in _FAILED.findall(summary)}
    if not codes:
        return []
    lines = text.splitlines()
    if any(_ERROR_LINE.search(line) and not _LOST_PEER.search(line) and not _TEARDOWN_ERROR.search(line)
           for line in lines):
        return []  # an error of some rank's own (an OOM, a NaN, a CUDA error): D20's crash, not a clean exit
    aborted_at_exit = "terminate called without an active exception" in text
    for at, line in enumerate(lines):
        if not _LOST_PEER.search(line):
            continue
        prefix = _RANK_PREFIX.match(line)
        lost = prefix.group(1) if prefix else None
        if lost is None and len(codes) > 1:
            return []  # which rank lost its peer cannot be told
        peers = {r: c for r, c in codes.items() if r != lost} if lost is not None else {}
        if any(c != -15 and not (c == -6 and aborted_at_exit) for c in peers.values()):
            return []  # a peer killed (-9) or failing with its own code: not a clean end of its loop
        frames = lines[max(0, at - STEP_WINDOW): at]
        who = f"rank {lost}" if lost is not None else f"rank {next(iter(codes))}"
        ended = ("ended with exit code 0" if not peers else
                 "ended with no error of its own (stopped by the launcher, or aborted in its teardown)")
        if not any(_IN_STEP.search(frame) for frame in frames):
            called = next((m.group(1) for frame in frames for m in [_EXPLICIT.search(frame)] if m), None)
            if called is None:
                return []
            # a collective of the script's own, outside a step, that the peer never came to: the peer had finished
            note = (f"{who} waited in {called}() (line {at + 1}) while the peer {ended}: only some ranks called it, "
                    "as a collective inside an `if rank == 0:` branch does (or one rank ran out of data first, D9)")
            return [Verdict("D21", "hint:collective-the-peer-never-called", (
                Evidence(file, at + 1, line, "hint:collective-the-peer-never-called"),
                Evidence(file, line_at(text, start)[0],
                         f"torchrun's summary: no other rank failed ({ended}); {who} was left in {called}()", "because")),
                score=PEER_EXITED_SCORE, tier="possible", note=note)]
        summary_no, _ = line_at(text, start)
        skipped = next((k for k, earlier in enumerate(lines[:at]) if _SKIPPED_STEP.search(earlier)), None)
        if skipped is not None:
            note = (f"{who} lost its peer inside a training step (line {at + 1}), and the peer {ended}: a rank "
                    f"skipped a step on a non-finite loss (line {skipped + 1}), ran one all-reduce fewer and "
                    "finished first; the skip was decided on that rank alone")
            return [Verdict("D20", "rule:peer-skipped-a-step", (
                Evidence(file, skipped + 1, lines[skipped], "rule:peer-skipped-a-step"),
                Evidence(file, at + 1, line, "because"),
                Evidence(file, summary_no, f"torchrun's summary: no other rank failed on its own ({ended})",
                         "because")), score=PEER_EXITED_SCORE + 0.1, note=note)]
        note = (f"{who} lost its peer inside a training step (line {at + 1}), and the peer {ended}: it ran out of "
                "batches first")
        return [Verdict("D9", "rule:peer-exited-cleanly", (
            Evidence(file, at + 1, line, "rule:peer-exited-cleanly"),
            Evidence(file, summary_no, f"torchrun's summary: no other rank failed on its own ({ended})", "because")),
            score=PEER_EXITED_SCORE, note=note)]
    return []
