"""Import hygiene: the catalogue, search and diagnosis paths never load torch or textual."""
import json
import subprocess
import sys

import pytest

LIGHT_MODULES = [
    "gpudoctor.main",
    "gpudoctor.kb.catalog",
    "gpudoctor.kb.search",
    "gpudoctor.kb.markdown",
    "gpudoctor.commands.show",
    "gpudoctor.commands.search",
    "gpudoctor.commands.list_entries",
    "gpudoctor.commands.diagnose",
    "gpudoctor.engine.diagnose",
    "gpudoctor.engine.scan",
    "gpudoctor.engine.ranks",
    "gpudoctor.engine.flight",
    "gpudoctor.report",
]


def _loaded_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_import_leaves_torch_and_textual_unloaded(module):
    loaded = _loaded_after(f"import {module}")
    assert "torch" not in loaded
    assert "textual" not in loaded


DATA = __import__("pathlib").Path(__file__).parent / "data" / "logs"


@pytest.mark.parametrize("argv", [["list"], ["show", "D8"], ["search", "address already in use"], ["show", "D8", "--json"],
                                  ["diagnose", str(DATA / "D4")], ["diagnose", str(DATA / "D20"), "--json"]])
def test_commands_run_without_torch_or_textual(argv, tmp_path):
    code = (
        "import sys, io\n"
        "from gpudoctor.main import main\n"
        f"rc = main({argv!r}, stdout=io.StringIO(), stderr=io.StringIO())\n"
        "assert rc == 0, rc\n"
    )
    loaded = _loaded_after(code)
    assert "torch" not in loaded and "textual" not in loaded


def test_commands_work_where_torch_cannot_be_imported(tmp_path):
    # a torch that raises on import stands in for a machine without torch
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    env_code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import io\nfrom gpudoctor.main import main\n"
        "for argv in (['list'], ['show', 'MN3'], ['search', 'nccl picks docker0']):\n"
        "    assert main(argv, stdout=io.StringIO(), stderr=io.StringIO()) == 0, argv\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
