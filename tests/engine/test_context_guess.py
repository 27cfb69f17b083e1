"""Guesses from a log's content when it shows no failure at all (engine/context_guess.py)."""
from __future__ import annotations

import io
import json

from gpudoctor.engine.context_guess import BASIS, CONTEXT_CHARS, SCALE, _distinct_lines, context_findings
from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import Source
from gpudoctor.kb.catalog import load_catalog

CATALOG = load_catalog(use_cache=False)

# an `accelerate env` print-out and the way the script was started, no error anywhere (written here in the
# shape accelerate's env command prints)
ENV_ONLY = """\
- `Accelerate` version: 0.20.3
- Platform: Linux-5.15.0-x86_64-with-glibc2.35
- Python version: 3.10.12
- PyTorch version (GPU?): 2.0.1+cu118 (True)
- `Accelerate` default config:
        - compute_environment: LOCAL_MACHINE
        - distributed_type: MULTI_GPU
        - num_processes: 4
        - machine_rank: 0
        - num_machines: 1
I started it with python train.py and nvidia-smi shows only GPU 0 busy, the other three idle.
"""


def run(text: str):
    return diagnose(CATALOG, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))


def test_a_log_without_failure_lines_gets_guesses_from_its_content():
    d = run(ENV_ONLY)
    assert [f.tier for f in d.findings] == ["possible"] * len(d.findings) and d.findings
    assert "D5" in [f.id for f in d.findings]
    for f in d.findings:
        assert f.signatures == (BASIS,) and 0 < f.score <= SCALE
        for e in f.evidence:  # each evidence line is the log's own line, at its own number
            assert ENV_ONLY.splitlines()[e.line - 1].strip().endswith(e.text[-20:].strip())


def test_a_failure_line_keeps_the_failure_guess_and_a_match_gets_no_content_guess():
    d = run(ENV_ONLY + "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error\n")
    assert all(f.signatures != (BASIS,) for f in d.findings)
    d = run(ENV_ONLY + "OSError: [Errno 98] Address already in use\nerror: RendezvousConnectionError\n")
    assert all(f.signatures != (BASIS,) for f in d.findings)


def test_blank_or_wordless_logs_get_nothing():
    assert run("\n\n   \n").findings == []
    assert run("12345\n0.25 0.5\n").findings == []


def test_only_the_last_distinct_lines_are_read():
    lines = [f"step {i} loss {i / 1000:.3f} launcher setting number {i}" for i in range(5000)]
    picked = _distinct_lines({"big.log": "\n".join(lines)})
    assert sum(len(t) + 1 for _, _, t in picked) <= CONTEXT_CHARS
    assert picked[-1] == ("big.log", 5000, lines[-1])
    assert [n for _, n, _ in picked] == list(range(5001 - len(picked), 5001))
    # repeated lines count once, at their last place
    picked = _distinct_lines({"rep.log": "same line\nother\nsame line\n"})
    assert [(n, t) for _, n, t in picked] == [(2, "other"), (3, "same line")]


def test_a_huge_text_is_read_from_its_tail_with_true_line_numbers():
    head = "x\n" * 300_000  # 600 KB of one repeated line, then the launch
    text = head + "accelerate launch --num_processes 1 train.py\n"
    picked = _distinct_lines({"h.log": text})
    assert picked[-1] == ("h.log", 300_001, "accelerate launch --num_processes 1 train.py")


def test_excluded_entries_and_guides_are_never_offered():
    found = context_findings(CATALOG, {"a.log": ENV_ONLY}, {"D5"})
    assert found and all(f.id != "D5" and not f.id.startswith("G") for f in found)


def test_the_cli_says_the_guesses_rest_on_content_and_exits_1(tmp_path, cli_proc):
    log = tmp_path / "env.log"
    log.write_text(ENV_ONLY)
    out = cli_proc("diagnose", str(log), env={"NO_COLOR": "1", "COLUMNS": "80"})
    assert out.code == 1, out.err
    assert "No failure line was found in this log" in out.out
    doc = json.loads(cli_proc("diagnose", "--json", str(log)).out)
    assert doc["findings"] and all(f["tier"] == "possible" for f in doc["findings"])
    assert all(f["signatures"] == [BASIS] for f in doc["findings"])


def test_lines_are_numbered_by_newline_alone():
    # a form feed or a vertical tab is no line break for the scanner, so not for the evidence either
    text = "header\x0cstill line one\nline two\x0bwith a tab\nline three\n"
    picked = _distinct_lines({"f.log": text})
    assert [n for _, n, _ in picked] == [1, 2, 3]


def test_a_binary_source_gets_no_guess_from_its_garbage(tmp_path):
    from gpudoctor.engine.sources import resolve

    blob = tmp_path / "core.bin"
    blob.write_bytes(b"\x00\x01accelerate launch num_processes\x00\n" * 50 + bytes(range(256)) * 40)
    d = diagnose(CATALOG, resolve([str(blob)]))
    assert all(f.signatures != (BASIS,) for f in d.findings)
