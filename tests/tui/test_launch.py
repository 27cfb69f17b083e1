"""Launching: no terminal prints help and exits 0; bad inputs are one line and exit 2; the CLI stays free of textual."""
from __future__ import annotations

import io
import json
import subprocess
import sys

from gpudoctor.main import main

from .conftest import LOGS

GPUDOCTOR = [sys.executable, "-m", "gpudoctor"]


def test_no_arguments_without_a_terminal_prints_help_and_exits_0():
    done = subprocess.run(GPUDOCTOR, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "usage: gpudoctor" in done.stdout and "tui" in done.stdout
    out = io.StringIO()
    assert main([], stdout=out, stderr=io.StringIO()) == 0
    assert "usage: gpudoctor" in out.getvalue()


def test_tui_without_a_terminal_is_a_usage_error():
    done = subprocess.run(GPUDOCTOR + ["tui"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "needs a terminal" in done.stderr


def test_bad_inputs_name_the_file(tmp_path):
    err = io.StringIO()
    assert main(["tui", str(tmp_path / "missing.log")], stdout=io.StringIO(), stderr=err) == 2
    assert "missing.log" in err.getvalue() and "Traceback" not in err.getvalue()
    err = io.StringIO()
    assert main(["tui", "--script", str(tmp_path / "train.py")], stdout=io.StringIO(), stderr=err) == 2
    assert "train.py" in err.getvalue()
    err = io.StringIO()
    assert main(["diagnose", "--tui", str(tmp_path / "gone")], stdout=io.StringIO(), stderr=err) == 2
    assert "gone" in err.getvalue()
    err = io.StringIO()
    assert main(["tui", "--cmd", "torchrun 'unclosed"], stdout=io.StringIO(), stderr=err) == 2
    assert "cannot parse the command" in err.getvalue() and "Traceback" not in err.getvalue()


def test_diagnose_without_tui_is_unchanged():
    out = io.StringIO()
    assert main(["diagnose", str(LOGS / "D8" / "aux-head-unused-torchrun.log"), "--json"], stdout=out,
                stderr=io.StringIO()) == 0
    assert json.loads(out.getvalue())["findings"][0]["id"] == "D8"


def test_the_cli_and_engine_never_load_textual():
    code = ("import io, sys\n"
            "import gpudoctor.main, gpudoctor.commands.tui, gpudoctor.kb.catalog, gpudoctor.engine.diagnose\n"
            "from gpudoctor.main import main\n"
            "main(['--help'], stdout=io.StringIO(), stderr=io.StringIO())\n"
            "main(['tui', '/nonexistent'], stdout=io.StringIO(), stderr=io.StringIO())\n"
            "print('textual' in sys.modules, any(m.startswith('gpudoctor.tui') for m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1].split() == ["False", "False"], done.stderr


def test_json_is_refused_for_the_interactive_session():
    for argv in (["tui", "--json"], ["diagnose", "--tui", "--json", str(LOGS)]):
        err = io.StringIO()
        assert main(argv, stdout=io.StringIO(), stderr=err) == 2
        assert "--json has no meaning in the interactive session" in err.getvalue()



def test_a_run_folder_with_its_script_beside_the_logs_passes_the_launch_checks(tmp_path):
    """QA25 Q12: `gpudoctor tui DIR` exited 2 on the note that DIR's train.py is not a log."""
    (tmp_path / "rank0.log").write_text("RuntimeError: Expected to have finished reduction in the prior iteration\n")
    (tmp_path / "train.py").write_text("import torch\n")
    err = io.StringIO()
    assert main(["tui", str(tmp_path)], stdout=io.StringIO(), stderr=err) == 2
    assert "needs a terminal" in err.getvalue() and "train.py" not in err.getvalue()
