"""`gpudoctor lint` end to end: exit codes through a real subprocess, output formats, ignores, selection."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "lint"
BUGGY = DATA / "buggy"
CORRECT = DATA / "correct"


def run(*args, env=None, cwd=None):
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "80", **(env or {})}
    return subprocess.run([sys.executable, "-m", "gpudoctor", "lint", *map(str, args)], capture_output=True,
                          text=True, env=full_env, cwd=cwd, timeout=120)


def test_exit_0_on_clean_file():
    proc = run(CORRECT / "broadcast_from_rank0.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no findings in 1 file" in proc.stdout


def test_exit_1_with_findings_and_human_output_with_caret():
    # a relative path, as a user at the repository root types it: the header line carries the path as given, and
    # an absolute path under a deep checkout (a CI clone) can be any length
    proc = run("d21_deepspeed_save_rank0.py", "--select", "D21", cwd=BUGGY)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if ":25:9: D21 error" in line)
    src = next(line for line in lines[head:] if line.lstrip().startswith("25 |"))
    caret = lines[lines.index(src) + 1]
    assert "engine.save_checkpoint" in src
    assert src.index("engine") == caret.index("^")  # the caret sits under the call
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "\x1b[" not in proc.stdout  # NO_COLOR


def test_exit_2_names_the_unparsable_file_and_lints_the_rest(tmp_path):
    shutil.copy(BUGGY / "d22_sampler_without_set_epoch.py", tmp_path / "good.py")
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    proc = run(tmp_path, "--format", "json")
    assert proc.returncode == 2
    assert "broken.py" in proc.stderr and "does not parse" in proc.stderr
    assert "Traceback" not in proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["files"] == 2
    assert [e["path"].endswith("broken.py") for e in payload["errors"]] == [True]
    assert any(f["entry_id"] == "D22" for f in payload["findings"])
    text = run(tmp_path, tmp_path / "gone.py")  # the summary counts what was checked and what was not
    assert text.returncode == 2
    block = text.stdout.strip().split("\n\n")[-1]  # the summary, wrapped to the terminal's width
    assert " ".join(block.split()).endswith("in 1 file (2 could not be checked: see the errors below)"), text.stdout
    assert all(len(line) <= 80 for line in block.splitlines())


def test_missing_path_and_unknown_rule_are_usage_errors(tmp_path):
    proc = run(tmp_path / "nope.py")
    assert proc.returncode == 2 and "no such file" in proc.stderr
    proc = run(BUGGY / "d22_sampler_without_set_epoch.py", "--select", "D99")
    assert proc.returncode == 2 and "D99" in proc.stderr and "Traceback" not in proc.stderr


def test_ignore_comment_silences_only_that_entry_on_that_line(tmp_path):
    src = (BUGGY / "d3_set_device_global_rank.py").read_text()
    target = tmp_path / "train.py"
    target.write_text(src.replace("# expect: D3", "# gpudoctor: ignore[D3]"))
    assert run(target, "--select", "D3").returncode == 0
    target.write_text(src.replace("# expect: D3", "# gpudoctor: ignore[D21]"))
    assert run(target, "--select", "D3").returncode == 1


def test_select_and_ignore(tmp_path):
    path = BUGGY / "d21_barrier_in_rank0_validation.py"
    ids = lambda proc: {f["entry_id"] for f in json.loads(proc.stdout)["findings"]}  # noqa: E731
    everything = ids(run(path, "--json"))
    assert {"D21", "MN3"} <= everything
    assert ids(run(path, "--json", "--select", "D21")) == {"D21"}
    assert "D21" not in ids(run(path, "--json", "--ignore", "collective-in-rank-branch"))


def test_json_findings_have_the_contract_fields():
    proc = run(BUGGY / "p6_accumulation_without_no_sync.py", "--format", "json")
    finding = next(f for f in json.loads(proc.stdout)["findings"] if f["entry_id"] == "P6")
    assert set(finding) == {"path", "line", "col", "entry_id", "rule", "severity", "message", "fix_id"}
    assert (finding["line"], finding["col"], finding["severity"]) == (18, 4, "warning")


def test_fix_id_comes_from_the_catalogue_at_runtime(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    builtin = next((Path(__file__).resolve().parents[3] / "kb").rglob("D22-*.yaml"))
    text = builtin.read_text()
    text = re.sub(r"(?m)^fix_actions:.*\n(?:[ -].*\n)*", "", text)
    text += ("fix_actions:\n  - id: call-set-epoch\n    kind: patch\n    safety: safe\n"
             "    title: Call sampler.set_epoch(epoch) each epoch\n    patch: sampler-set-epoch\n")
    (kb / builtin.name).write_text(text)
    proc = run(BUGGY / "d22_sampler_without_set_epoch.py", "--json", "--select", "D22",
               env={"GPUDOCTOR_KB": str(kb), "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert [f["fix_id"] for f in json.loads(proc.stdout)["findings"]] == ["call-set-epoch"], proc.stderr


def test_directory_walk_in_parallel_equals_serial(tmp_path):
    for i in range(40):
        shutil.copy(BUGGY / "d21_gather_object_main.py", tmp_path / f"s{i:02d}.py")
    (tmp_path / ".venv").mkdir()
    shutil.copy(BUGGY / "d22_sampler_without_set_epoch.py", tmp_path / ".venv" / "skipped.py")
    serial = json.loads(run(tmp_path, "--json", "--jobs", "1").stdout)
    parallel = json.loads(run(tmp_path, "--json", "--jobs", "2").stdout)
    assert serial == parallel
    assert serial["files"] == 40 and len([f for f in serial["findings"] if f["entry_id"] == "D21"]) == 40


def test_shell_launch_script_is_linted(tmp_path):
    proc = run(BUGGY / "mn5_launch.sh", "--json")
    assert proc.returncode == 1
    assert [(f["entry_id"], f["line"]) for f in json.loads(proc.stdout)["findings"]] == [("MN5", 5)]


def test_list_rules_and_help():
    proc = run("--list-rules", "--json")
    rules = json.loads(proc.stdout)
    assert {r["id"] for r in rules} >= {"D2", "D3", "D21", "D22", "P3", "D8", "D10", "D23", "D27", "P2", "P6", "MN3",
                                        "MN5", "P1"}
    assert run("--help").returncode == 0


@pytest.mark.parametrize("path", sorted(BUGGY.glob("*.py")) + sorted(BUGGY.glob("*.sh")) + sorted(BUGGY.glob("*.sbatch")),
                         ids=lambda p: p.name)
def test_buggy_script_reports_the_established_entry_at_its_line(path):
    from gpudoctor.engine.lint import lint_paths

    expected = {(m.group(1), n) for n, line in enumerate(path.read_text().splitlines(), 1)
                for m in [re.search(r"#\s*expect:\s*([A-Z]+\d+)", line)] if m}
    got = {(f.entry_id, f.line) for f in lint_paths([str(path)]).findings}
    assert expected <= got


@pytest.mark.parametrize("path", sorted(CORRECT.glob("*.py")) + sorted(CORRECT.glob("*.sbatch")), ids=lambda p: p.name)
def test_correct_script_has_no_error_or_warning(path):
    from gpudoctor.engine.lint import lint_paths

    found = [f for f in lint_paths([str(path)]).findings if f.severity != "note"]
    assert found == []


def test_a_crashing_check_is_an_internal_error_for_that_file_only(tmp_path, monkeypatch):
    from gpudoctor.engine.lint import lint_paths
    from gpudoctor.engine.lint.checks import BY_CODE

    (tmp_path / "a.py").write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    (tmp_path / "b.txt").write_text("not linted")

    def boom(script):
        raise KeyError("bug")

    monkeypatch.setattr(BY_CODE["MN3"], "find", boom)
    result = lint_paths([str(tmp_path / "a.py")], jobs=1)
    assert result.findings == ()
    assert result.errors == ((str(tmp_path / "a.py"), "internal error: check MN3 failed: KeyError: 'bug'"),)


def test_unreadable_inputs_are_named_not_raised(tmp_path):
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: ascii -*-\nx = '\xff'\n")
    (tmp_path / "deep.py").write_text("x = " + "(" * 300 + "1" + ")" * 300 + "\n")
    proc = run(tmp_path, "--format", "json")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    named = {Path(e["path"]).name for e in json.loads(proc.stdout)["errors"]}
    assert {"nul.py", "latin.py"} <= named


def test_pre_commit_hook_runs_this_command():
    import yaml

    hooks = yaml.safe_load((Path(__file__).resolve().parents[3] / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "gpudoctor-lint")
    assert hook["entry"] == "gpudoctor lint" and hook["language"] == "python"
    assert set(hook["types_or"]) == {"python", "shell"}
    # the hook's own arguments: a file with notes only passes, one with a warning fails
    notes_only = Path(__file__).resolve().parents[2] / "data" / "lint" / "correct" / "rank0_logging_no_collective.py"
    assert run(notes_only).returncode == 1 and run(*hook["args"], notes_only).returncode == 0
    assert run(*hook["args"], BUGGY / "p2_ddp_before_to_device.py").returncode == 1


def test_lint_paths_from_a_threaded_caller_and_duplicates(tmp_path):
    import threading

    from gpudoctor.engine.lint import lint_paths

    for i in range(30):
        shutil.copy(BUGGY / "d22_sampler_without_set_epoch.py", tmp_path / f"t{i:02d}.py")
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("r", lint_paths([str(tmp_path), str(tmp_path)], jobs=2)))
    worker.start()
    worker.join(120)
    result = out["r"]
    assert result.files == 30
    assert len([f for f in result.findings if f.entry_id == "D22"]) == 30


@pytest.mark.parametrize("command", [["lint", "x.py", "--format", "human", "--json"],
                                     ["diagnose", "x.log", "--format", "markdown", "--json"]])
def test_two_formats_at_once_are_refused(command, tmp_path, capsys):
    """QA23 L1: `--format human --json` printed human silently; the two options now conflict."""
    from gpudoctor.main import main

    (tmp_path / "x.py").write_text("print(1)\n")
    (tmp_path / "x.log").write_text("hello\n")
    command = [str(tmp_path / c) if c in ("x.py", "x.log") else c for c in command]
    assert main(command) == 2
    assert "ask for two formats" in capsys.readouterr().err


def test_an_unknown_launcher_is_named_and_the_scripts_are_still_linted(tmp_path, capsys):
    """QA23 A5: `lint --cmd "mpirun ..." train.py` stopped at the command and linted nothing."""
    from gpudoctor.main import main

    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\nfrom torch.utils.data import DistributedSampler\n"
                      "dist.init_process_group('gloo')\nsampler = DistributedSampler(range(8))\n"
                      "for epoch in range(3):\n    for x in sampler:\n        pass\n")
    assert main(["lint", "--cmd", "mpirun -np 16 python train.py", str(script)]) == 2
    captured = capsys.readouterr()
    assert "D22" in captured.out and "'mpirun' is not a launcher" in captured.err


def test_a_walked_folder_skips_broken_links_and_lints_a_linked_file_once(tmp_path, capsys):
    """QA23 A10: a dangling link failed the run (exit 2) and a link to a file reported it twice."""
    from gpudoctor.main import main

    (tmp_path / "real.py").write_text("import torch.distributed as dist\nfrom torch.utils.data import "
                                      "DistributedSampler\ndist.init_process_group('gloo')\n"
                                      "sampler = DistributedSampler(range(8))\nfor epoch in range(3):\n"
                                      "    for x in sampler:\n        pass\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "real.py")
    (tmp_path / "dangling.py").symlink_to(tmp_path / "nonexist.py")
    assert main(["lint", str(tmp_path), "--select", "D22", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [Path(f["path"]).name for f in data["findings"]] == ["real.py"] and data["errors"] == []


def test_prints_after_setup_for_distributed_are_rank_0_s_already():
    """QA23 A12: DETR, DeiT and MAE replace builtins.print with a master-only print (setup_for_distributed)."""
    from gpudoctor.engine.lint.runner import lint_source

    body = ("import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "{setup}dist.init_process_group('nccl')\nmodel = DDP(torch.nn.Linear(2, 2))\n\n\ndef main():\n"
            "    for epoch in range(3):\n        print(f'epoch {{epoch}} done')\n")
    plain = lint_source(body.format(setup=""), "main.py", select=["D23"]).findings
    quiet = lint_source(body.format(setup="from util.misc import setup_for_distributed\n"
                                          "setup_for_distributed(dist.get_rank() == 0)\n"), "main.py",
                        select=["D23"]).findings
    assert [f.severity for f in plain] == ["note"] and quiet == ()


@pytest.mark.parametrize("strategy, flagged", [("ddp", True), ("auto", False)])
def test_a_lightning_training_step_returning_none_on_a_nan_is_d20_under_ddp(strategy, flagged):
    """QA23 A9: the catalogue's Lightning form of a rank-local skip."""
    from gpudoctor.engine.lint.runner import lint_source

    text = ("import torch\nimport lightning as L\n\n\nclass Model(L.LightningModule):\n"
            "    def training_step(self, batch, batch_idx):\n        loss = self.layer(batch).sum()\n"
            "        if not torch.isfinite(loss):\n            return None\n        return loss\n\n\n"
            f"trainer = L.Trainer(strategy='{strategy}', devices=8)\n")
    lines = [f.line for f in lint_source(text, "m.py", select=["D20"]).findings]
    assert lines == ([8] if flagged else [])


@pytest.mark.parametrize("warm, flagged", [(True, False), (False, True)])
def test_lazy_layers_are_fine_after_the_dummy_forward_d26_prescribes(warm, flagged):
    """QA23 A18: the warning stayed after the very forward pass it asks for."""
    from gpudoctor.engine.lint.runner import lint_source

    text = ("import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel "
            "as DDP\n\ndist.init_process_group('gloo')\nmodel = torch.nn.Sequential(torch.nn.LazyLinear(4))\n"
            + ("with torch.no_grad():\n    model(torch.zeros(1, 32))\n" if warm else "") + "model = DDP(model)\n")
    assert bool(lint_source(text, "lazy.py", select=["D26"]).findings) == flagged


@pytest.mark.parametrize("expr, flagged", [("dist.all_reduce(loss) if self.rank == 0 else loss", True),
                                           ("loss if self.rank != 0 else dist.all_reduce(loss)", True),
                                           ("dist.all_reduce(loss) if self.training else loss", False)])
def test_a_collective_in_a_conditional_expression_on_the_rank_is_d21(expr, flagged):
    """QA23 L2: `return dist.all_reduce(loss) if self.rank == 0 else loss` was missed; the if statement was not."""
    from gpudoctor.engine.lint.runner import lint_source

    text = ("import torch.distributed as dist\n\n\nclass Trainer:\n    def __init__(self):\n"
            "        self.rank = dist.get_rank()\n\n    def reduce(self, loss):\n"
            f"        return {expr}\n")
    assert [f.line for f in lint_source(text, "t.py", select=["D21"]).findings] == ([9] if flagged else [])


def _notebook(cells: list[str]) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# training\n"]},
        *({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
           "source": [line + "\n" for line in cell.splitlines()]} for cell in cells)]}, indent=1)


def test_a_notebooks_code_cells_are_linted_and_each_finding_names_its_cell(tmp_path):
    """QA25 Q14: an .ipynb parsed as one Python expression (its JSON) and passed as clean."""
    buggy = (BUGGY / "d22_sampler_without_set_epoch.py").read_text()
    nb = tmp_path / "train.ipynb"
    nb.write_text(_notebook(["%load_ext autoreload\n!nvidia-smi\nimport os", buggy]))
    proc = run(nb, "--select", "D22")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "D22 error" in proc.stdout and "cell 3, line " in proc.stdout  # the markdown cell counts as cell 1
    shown = next(line for line in proc.stdout.splitlines() if re.match(r"\s+\d+ \| ", line))
    assert '"' not in shown.split("|", 1)[1][:2]  # the cell's code, not the notebook's JSON
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "fix", "D22", "--script", str(nb)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Jupyter notebook" in proc.stderr


def test_a_notebook_that_is_not_json_or_does_not_parse_is_named(tmp_path):
    bad = tmp_path / "broken.ipynb"
    bad.write_text("{ not json")
    proc = run(bad)
    assert proc.returncode == 2 and "broken.ipynb" in proc.stderr and "not a readable notebook" in proc.stderr
    nb = tmp_path / "syntax.ipynb"
    nb.write_text(_notebook(["import os", "def f(:\n    pass"]))
    proc = run(nb)
    assert proc.returncode == 2 and "(cell 3, line 1)" in proc.stderr, proc.stderr
