"""The command line: help everywhere, JSON for scripts, colour rules, forgiving ids, exit codes, no tracebacks."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.main import COMMANDS

BROKEN = "id: X7\ntitle: broken\nsection: user\nsummary: s\nsymptoms: [a]\ncause: c\nfix_summary: f\n" \
         "fix: [{text: t}]\nlog_visibility: shows\nrelated: [{id: D99, why: nope}]\n"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(cli_proc, command):
    r = cli_proc(command, "--help")
    assert r.code == 0
    assert r.out.startswith("usage: gpudoctor " + command)
    assert "--json" in r.out and "--no-color" in r.out
    wide = [line for line in r.out.splitlines() if len(line) > 80]
    assert not wide, f"gpudoctor {command} --help is wider than 80 columns: {wide}"


def test_top_level_help_and_version(cli_proc):
    assert cli_proc("--help").code == 0
    r = cli_proc("--version")
    assert r.code == 0 and r.out.startswith("gpudoctor ")


def test_bad_usage_exits_2_without_traceback(cli_proc):
    r = cli_proc("show")
    assert r.code == 2 and "error" in r.err and "Traceback" not in r.err
    r = cli_proc("nonsense")
    assert r.code == 2 and "Traceback" not in r.err


@pytest.mark.parametrize("given", ["d8", "D08", "D8", " d-8 "])
def test_ids_are_forgiving(cli, given):
    r = cli("show", given, "--json")
    assert r.code == 0
    assert json.loads(r.out)["id"] == "D8"


def test_unknown_id_suggests_the_closest_and_exits_2(cli):
    r = cli("show", "MN9")
    assert r.code == 2
    assert "no entry 'MN9'" in r.err and "closest:" in r.err and "MN" in r.err


def test_show_markdown_and_json_carry_the_same_entry(cli):
    md = cli("show", "MN2", "--markdown").out
    doc = json.loads(cli("show", "MN2", "--json").out)
    assert md.startswith("# MN2 · ")
    assert doc["title"] in md
    assert all(step["text"].split()[0] in md for step in doc["fix"])
    assert "NCCL_SOCKET_IFNAME" in md


def test_list_json_and_sections(cli):
    doc = json.loads(cli("list", "--json").out)
    assert len(doc) == 43 and {"id", "title", "section", "log_visibility"} <= set(doc[0])
    r = cli("list", "--section", "multi-node")
    assert r.code == 0 and "MN1" in r.out and "D8 " not in r.out
    assert cli("list", "--section", "gpus").code == 2


def test_list_fits_80_columns(cli):
    assert max(len(line) for line in cli("list").out.splitlines()) <= 80


def test_search_json_and_exit_codes(cli):
    r = cli("search", "nccl picks docker0", "--json")
    doc = json.loads(r.out)
    assert r.code == 0 and doc["results"][0]["id"] == "MN2"
    assert 0 < doc["results"][0]["score"] <= 1
    assert cli("search", "zebra crossing", "--json").code == 1


def test_no_color_env_and_flags(cli_proc):
    plain = cli_proc("show", "D4", env={"NO_COLOR": "1"})
    assert "\x1b[" not in plain.out
    forced = cli_proc("show", "D4", "--color")
    assert "\x1b[" in forced.out
    off = cli_proc("show", "D4", "--no-color", env={"NO_COLOR": "", "FORCE_COLOR": "1"})
    assert "\x1b[" not in off.out


def test_validate_names_file_and_field_and_exits_1(cli, tmp_path):
    (tmp_path / "X7-broken.yaml").write_text(BROKEN)
    r = cli("validate", str(tmp_path))
    assert r.code == 1
    assert f"{tmp_path / 'X7-broken.yaml'}: related[0]: unknown id 'D99'" in r.out
    assert cli("validate").code == 0


def test_gpudoctor_kb_env_adds_runbooks_and_reports_broken_ones(cli_proc, tmp_path):
    good = BROKEN.replace("id: X7", "id: X8").replace("D99", "D8").replace("title: broken", "title: Our NFS stalls")
    (tmp_path / "X8-nfs.yaml").write_text(good)
    (tmp_path / "X7-broken.yaml").write_text(BROKEN)
    r = cli_proc("list", "--json", env={"GPUDOCTOR_KB": str(tmp_path)})
    ids = [e["id"] for e in json.loads(r.out)]
    assert "X8" in ids and "D8" in ids  # X7 still loads: only its cross-reference is broken, and said so
    assert "X7-broken.yaml: related[0]: unknown id 'D99'" in r.err


def test_closed_pipe_is_not_an_error(tmp_path):
    proc = subprocess.run(f"{sys.executable} -m gpudoctor show D19 | head -1", shell=True,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("D19")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


class _ClosedAfter:
    """A standard output whose reader has gone (`| head -c 10` after its bytes): every write fails."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        pass

    def isatty(self):
        return False


@pytest.mark.parametrize("fmt", [["--json"], ["--format", "markdown"], []])
def test_closed_pipe_keeps_the_diagnosis_exit_code(fmt):
    """`gpudoctor diagnose log | head` still says "nothing matched" (1) when nothing did, and 0 after a match."""
    import io

    from gpudoctor.main import main

    log = Path(__file__).resolve().parent.parent / "data" / "logs" / "negative" / "clean-torchrun-2-procs-success.log"
    example = Path(__file__).resolve().parents[2] / "examples" / "rank-crash-then-timeout"
    for path, code in ((log, 1), (example, 0)):
        err = io.StringIO()
        assert main(["diagnose", *fmt, str(path)], stdout=_ClosedAfter(), stderr=err) == code, err.getvalue()
        assert "Traceback" not in err.getvalue()


def test_closed_pipe_keeps_every_commands_exit_code():
    """The guard sits under every command, not in diagnose alone: `gpudoctor lint train.py | head` still fails
    on a finding, and `gpudoctor list | head` still succeeds."""
    import io

    from gpudoctor.main import main

    buggy = Path(__file__).resolve().parents[1] / "data" / "lint" / "buggy" / "d26_vocab_extended_on_main_process.py"
    for argv, code in ((["lint", str(buggy)], 1), (["list"], 0), (["search", "--json", "zebra crossing"], 1)):
        err = io.StringIO()
        assert main(argv, stdout=_ClosedAfter(), stderr=err) == code, (argv, err.getvalue())
        assert "Traceback" not in err.getvalue()


def test_list_marks_a_users_runbook_and_still_says_whether_a_log_shows_it(cli, tmp_path):
    (tmp_path / "U3-scratch.yaml").write_text(
        "id: U3\ntitle: Our cluster's scratch is full\nsection: user\nsummary: The scratch fills up.\n"
        "symptoms: [No space left on device]\ncause: Scratch full.\nfix:\n  - text: Clean scratch.\n"
        "fix_summary: Clean scratch.\nlog_visibility: shows\n", encoding="utf-8")
    r = cli("list", "--no-color", "--kb", str(tmp_path))
    row = next(line for line in r.out.splitlines() if line.startswith("U3"))
    assert row.split()[:3] == ["U3*", "user", "yes"]
    assert "* from your own runbooks" in r.out
    assert "*" not in next(line for line in r.out.splitlines() if line.startswith("D1 "))


def test_search_with_no_match_echoes_a_long_query_cut_short(cli):
    r = cli("search", "--no-color", "x" * 5000)
    assert r.code == 1 and "Nothing in the catalogue matches" in r.out
    assert max(len(line) for line in r.out.splitlines()) < 120 and "x" * 61 not in r.out


def test_validate_of_a_folder_that_is_not_one_is_a_usage_error(cli, tmp_path):
    r = cli("validate", str(tmp_path / "missing"))
    assert r.code == 2 and "no such folder" in r.err
    (tmp_path / "X5.yaml").write_text("id: X5\n")
    r = cli("validate", str(tmp_path / "X5.yaml"))
    assert r.code == 2 and "a file; pass the folder that holds it" in r.err
