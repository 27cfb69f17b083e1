"""D1's patch for a parser that knows one spelling of the local-rank argument: both spellings parse afterwards, in a
real interpreter, as each launcher era passes them; the patch keeps quotes and layout and refuses what it cannot fix."""
from __future__ import annotations

import subprocess
import sys

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches import get

PATCH = get("local-rank-both-spellings")
SCRIPT = """import argparse
parser = argparse.ArgumentParser()
parser.add_argument({spelled!r}, type=int, default=-1)
parser.add_argument("--lr", type=float, default=1e-3)
args = parser.parse_args()
print("local_rank", args.local_rank)
"""


def _run(path, *argv):
    return subprocess.run([sys.executable, str(path), *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("spelled, passed", [("--local_rank", "--local-rank=3"), ("--local-rank", "--local_rank=3")])
def test_the_other_launchers_spelling_fails_before_and_parses_after(tmp_path, spelled, passed):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(spelled=spelled))
    before = _run(script, passed, "--lr", "0.1")
    assert before.returncode == 2 and "unrecognized arguments" in before.stderr
    after, notes = PATCH(script.read_text(), str(script), {})
    script.write_text(after)
    for argv in ([passed], [spelled + "=3"]):
        run = _run(script, *argv)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "local_rank 3"
    assert "LOCAL_RANK" in notes[0]


def test_a_last_positional_string_gets_its_comma_and_quotes_are_kept():
    after, _ = PATCH("p.add_argument('--local-rank')\n", "t.py", {})
    assert after == "p.add_argument('--local-rank', '--local_rank')\n"


@pytest.mark.parametrize("source", [
    "p.add_argument('--local_rank', '--local-rank', type=int)\n",
    "p.add_argument('--rank', type=int)\n",
    "x = '--local_rank'\n",
])
def test_nothing_to_fix_is_said(source):
    with pytest.raises(NotApplicable, match="no add_argument"):
        PATCH(source, "t.py", {})
