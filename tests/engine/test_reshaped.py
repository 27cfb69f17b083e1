"""Logs as they reach a user: a collector's column before every line (kubectl --timestamps, containerd, docker
compose, Ray, srun --label), torchrun --tee's prefix, a reply's quote marks, CRLF line ends and ANSI colours read
like the bare log."""
from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import pytest

from gpudoctor.engine.columns import as_printed
from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.patterns import crlf_tolerant
from gpudoctor.engine.prefix import parse_prefix
from gpudoctor.engine.sources import Source
from gpudoctor.kb.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[2]
TRACEBACK = ['Traceback (most recent call last):', '  File "train.py", line 12, in <module>', '    main()',
             'RuntimeError: boom']


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_cache=False)


@pytest.mark.parametrize("column", ["2024-05-01T12:34:56.123456789Z ", "2024-05-01T12:34:56.123Z stderr F ",
                                    "trainer-1  | ", "trainer_1    | ", "(RayTrainWorker pid=4242) ",
                                    "(RayTrainWorker pid=4242, ip=10.0.0.3) ", "3: ", "> ", "worker-1: ", "10.0.0.2: ",
                                    "[pod/trainer-worker-0/pytorch] ", "[1,mpirank:0,algo-1]<stderr>:"])
def test_a_collectors_column_is_cut_and_the_indentation_kept(column):
    text = "\n".join(column + line for line in TRACEBACK) + "\n"
    assert as_printed(text) == "\n".join(TRACEBACK) + "\n"


def test_a_log_whose_lines_mostly_carry_no_column_is_left_alone():
    text = "\n".join(TRACEBACK + ["2024-05-01T12:34:56Z one timestamped line", "plain"]) + "\n"
    assert as_printed(text) is text
    assert as_printed("2024-05-01T12:34:56Z alone") == "2024-05-01T12:34:56Z alone"  # one line is no column


def test_colour_codes_are_cut_and_lines_stay_in_place():
    text = "\x1b[31mRuntimeError\x1b[0m: boom\n\x1b[1;33mWARNING\x1b[0m x\n"
    assert as_printed(text) == "RuntimeError: boom\nWARNING x\n"


def test_a_timestamp_prefix_leaves_a_tracebacks_indentation():
    head = parse_prefix('2024-05-01T12:34:56.123456789Z   File "train.py", line 12, in <module>')
    assert head.timestamp and head.body == '  File "train.py", line 12, in <module>'
    compose = parse_prefix("trainer-1  | [rank1]: RuntimeError: boom")
    assert (compose.source, compose.rank, compose.body) == ("trainer-1", 1, "RuntimeError: boom")


def test_pdshs_host_column_is_a_line_prefix_and_a_step_label_is_not():
    head = parse_prefix("worker-1: [rank3]: RuntimeError: boom")
    assert (head.host, head.rank, head.body) == ("worker-1", 3, "RuntimeError: boom")
    assert parse_prefix("10.0.0.2: Traceback (most recent call last):").body == "Traceback (most recent call last):"
    for line in ("step1: loss 3.2", "RuntimeError: boom", "rank0: done", "cuda:0: ok"):
        assert parse_prefix(line).body == line, line


def test_kubectl_prefix_and_sagemakers_mpi_column_are_line_prefixes():
    pod = parse_prefix("[pod/trainer-worker-0/pytorch] [rank1]: RuntimeError: boom")
    assert (pod.host, pod.source, pod.rank, pod.body) == ("trainer-worker-0", "pytorch", 1, "RuntimeError: boom")
    mpi = parse_prefix("[1,mpirank:3,algo-2]<stderr>:Traceback (most recent call last):")
    assert (mpi.rank, mpi.host, mpi.stream, mpi.body) == (3, "algo-2", "stderr", "Traceback (most recent call last):")


def test_an_end_of_line_anchor_also_takes_a_carriage_return():
    assert crlf_tolerant(r"^Killed(?: +\S.*)?$") == r"^Killed(?: +\S.*)?\r?$"
    assert crlf_tolerant(r"[$]x\$y") == r"[$]x\$y"  # in a class, or escaped: a dollar sign
    assert crlf_tolerant(r"timeout:?\s*$") == r"timeout:?\s*$"  # \s takes the \r already


def test_a_crlf_log_is_diagnosed_as_the_same_log(catalog):
    log = (ROOT / "tests/data/logs/D23/resume-from-checkpoint-killed-mid-save.log").read_text()
    runs = [diagnose(catalog, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))
            for text in (log, log.replace("\n", "\r\n"))]
    assert [[(f.id, f.tier) for f in r.findings] for r in runs] == [[("D23", "match")]] * 2


@pytest.mark.parametrize("column", ["Nov 29 12:00:01 ", "12:00:01 ", "[12:00:01] ", "(pid=1234) ",
                                    "(pid=1234, ip=10.0.0.3) "])
def test_ts_a_bare_time_and_rays_task_prefix_read_like_the_bare_log(catalog, column):
    """QA24 R7: `| ts`, a time of day and Ray's "(pid=N)" before every line turned the confident match of a real
    torchrun log into wrong guesses, and `ts` lines were glued together as if a hard-wrapped paste."""
    log = (ROOT / "tests/data/logs/D23/resume-from-checkpoint-killed-mid-save.log").read_text()
    runs = [diagnose(catalog, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))
            for text in (log, "".join(column + line for line in log.splitlines(keepends=True)))]
    bare, prefixed = ([(f.id, f.tier, round(f.score, 3), [(e.line, e.signature) for e in f.evidence]) for f in r.findings]
                      for r in runs)
    assert bare and bare[0][1] == "match"
    assert prefixed == bare


# rich.traceback's box as HF accelerate/transformers print it: context lines around the failing one, a path too long
# for its row moved the function name to the next row, one folded at the box's edge
RICH = """[rank1]:╭───────────────────── Traceback (most recent call last) ─────────────────────╮
[rank1]:│ /work/train.py:40 in <module>                                               │
[rank1]:│                                                                              │
[rank1]:│   38 │   args = parse()                                                      │
[rank1]:│   39 │                                                                       │
[rank1]:│ ❱ 40 │   main(args)                                                          │
[rank1]:│   41                                                                         │
[rank1]:│                                                                              │
[rank1]:│ /opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py:│
[rank1]:│ 617 in initialize_optimizer_states                                           │
[rank1]:│                                                                              │
[rank1]:│   616 │   │   │   single_grad_partition = torch.zeros(int(self.partition_size│
[rank1]:│ ❱ 617 │   │   │   │   │   │   │   │   │   │   dtype=self.single_partition_of_│
[rank1]:│                                                                              │
[rank1]:│ /opt/conda/lib/python3.10/site-packages/torch/distributed/utils.py:315 in    │
[rank1]:│ _sync_module_states                                                          │
[rank1]:│ ❱ 315 │   _sync_params_and_buffers(process_group, module_states)               │
[rank1]:╰──────────────────────────────────────────────────────────────────────────────╯
[rank1]:OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB""".split("\n")


def test_a_rich_traceback_is_read_as_python_prints_it():
    from gpudoctor.engine.tbforms import plain_tracebacks
    from gpudoctor.engine.tracebacks import parse_tracebacks

    plain = plain_tracebacks(RICH)
    assert len(plain) == len(RICH)  # line for line: evidence keeps its numbers
    assert plain[0] == "[rank1]:Traceback (most recent call last):"
    body = [line for line in plain if line != "[rank1]:"]
    assert body[1:3] == ['[rank1]:  File "/work/train.py", line 40, in <module>', "[rank1]:    main(args)"]
    assert body[3] == ('[rank1]:  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/'
                       'stage_1_and_2.py", line 617, in initialize_optimizer_states')
    assert body[5].endswith('utils.py", line 315, in _sync_module_states')
    [info] = parse_tracebacks(RICH)
    assert (info.exc_type, info.rank) == ("OutOfMemoryError", 1)
    assert [f.function for f in info.frames] == ["<module>", "initialize_optimizer_states", "_sync_module_states"]
    assert info.frames[0].source == "main(args)"


def test_a_box_cut_short_is_left_where_it_stops():
    from gpudoctor.engine.tbforms import plain_tracebacks

    cut = RICH[:3] + ["plain line after a cut paste"]
    assert plain_tracebacks(cut)[-1] == "plain line after a cut paste"
    assert plain_tracebacks(["╭── not a traceback ──╮", "│ x │"]) == ["╭── not a traceback ──╮", "│ x │"]


IPYTHON8 = """---------------------------------------------------------------------------
ProcessRaisedException                    Traceback (most recent call last)
Cell In[4], line 3
      1 from accelerate import notebook_launcher
----> 3 notebook_launcher(train, num_processes=2)

File /opt/conda/lib/python3.10/site-packages/accelerate/launchers.py:186, in notebook_launcher(function, args)
    183 try:
--> 186     start_processes(launcher, args=args, nprocs=num_processes, start_method="fork")
    187 except ProcessRaisedException as e:

File /opt/conda/lib/python3.10/site-packages/torch/multiprocessing/spawn.py:160, in ProcessContext.join(self)
    (...)
--> 160 raise ProcessRaisedException(msg, error_index, failed_process.pid)

ProcessRaisedException: process 1 failed""".split("\n")
IPYTHON7 = """\x1b[0;31mRuntimeError\x1b[0m                              Traceback (most recent call last)
<ipython-input-4-0c1d1c6f7e9b> in <module>
      1 x = 1
----> 2 model = DDP(model)

~/anaconda3/lib/python3.8/site-packages/torch/nn/parallel/distributed.py in __init__(self, module, device_ids)
    446         # Sync params and buffers
--> 447         self._sync_params_and_buffers(authoritative_rank=0)

RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error""".split("\n")


@pytest.mark.parametrize("lines, want", [
    (IPYTHON8, ("ProcessRaisedException", [("Cell In[4]", 3, "<module>"), ("launchers.py", 186, "notebook_launcher"),
                                          ("spawn.py", 160, "ProcessContext.join")])),
    (IPYTHON7, ("RuntimeError", [("<ipython-input-4-0c1d1c6f7e9b>", 2, "<module>"),
                                 ("distributed.py", 447, "__init__")])),
])
def test_an_ipython_traceback_is_read_as_python_prints_it(lines, want):
    from gpudoctor.engine.tbforms import plain_tracebacks
    from gpudoctor.engine.tracebacks import parse_tracebacks

    assert len(plain_tracebacks(lines)) == len(lines)
    [info] = parse_tracebacks(lines)
    assert info.exc_type == want[0]
    assert [(f.file.rsplit("/", 1)[-1], f.line, f.function) for f in info.frames] == want[1]
    assert info.frames[-1].source.startswith(("raise ProcessRaisedException", "self._sync_params_and_buffers"))


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("reshaped_accuracy", ROOT / "bench" / "reshaped_accuracy.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


@pytest.mark.timeout(240)
def test_every_reshaping_of_the_accuracy_set_loses_at_most_two_points_and_adds_no_alarm(capsys):
    figures = _bench().run()
    base, base_alarms = figures.pop("as written")
    assert len(figures) == 15
    for name, (top1, alarms) in figures.items():
        assert base - top1 <= 0.02 and alarms <= base_alarms, (name, top1, base, alarms)


@pytest.mark.parametrize("line, want", [
    ("2024-05-01T12:34:56.123456789Z [rank0]: RuntimeError: x", "[rank0]: RuntimeError: x"),
    ("2024-05-01T12:34:56.1Z stderr F RuntimeError: x", "RuntimeError: x"),
    ("trainer-1  | RuntimeError: x", "RuntimeError: x"),
    ("> > RuntimeError: x", "RuntimeError: x"),
    ("3: RuntimeError: x", "3: RuntimeError: x"),  # srun's task id says which process: kept
    ("(RayTrainWorker pid=42) RuntimeError: x", "(RayTrainWorker pid=42) RuntimeError: x"),
    ("2024-05-01T12:34:56Z", "2024-05-01T12:34:56Z"),  # nothing after it: the line stays whole
])
def test_shown_evidence_leaves_out_a_column_that_says_nothing_about_the_run(line, want):
    from gpudoctor.engine.columns import shown

    assert shown(line) == want
