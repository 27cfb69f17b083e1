"""The installed `gpudoctor` driven under tmux: launch, search, open an entry, load a log (typed and piped), dump a
hung job's stacks, quit."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import LOGS, ROOT

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
BIN = Path(sys.executable).parent / "gpudoctor"
D8_LOG = LOGS / "D8" / "aux-head-unused-torchrun.log"


class Tmux:
    def __init__(self, tmp_path: Path):
        self.socket = f"gpudoctor-test-{os.getpid()}"
        self.env = {**os.environ, "TERM": "xterm-256color"}
        self.env.pop("NO_COLOR", None)
        self.env.pop("TMUX", None)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=self.env,
                              timeout=30).stdout

    def start(self, command: str, cwd: Path = ROOT) -> None:
        self.tmux("new-session", "-d", "-s", "gd", "-x", "100", "-y", "30", "-c", str(cwd),
                  f"{command}; echo EXITED=$?; sleep 30")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "gd", *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "gd", "-l", text)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "gd")

    def wait_for(self, *needles: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if all(n in text for n in needles):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {needles!r} on screen:\n{text}")
            time.sleep(0.2)

    def close(self) -> None:
        self.tmux("kill-server")


@pytest.fixture
def tmux(tmp_path):
    session = Tmux(tmp_path)
    yield session
    session.close()


def test_launch_search_entry_log_quit(tmux):
    assert BIN.exists(), "gpudoctor is not installed in this environment"
    tmux.start(shlex.quote(str(BIN)))
    tmux.wait_for("describe what you see", "D1")  # no arguments on a terminal: the TUI
    tmux.type("expected to have finishd reduction")  # a typo on purpose
    tmux.wait_for("D8", "Parameters without a gradient")
    tmux.keys("Enter")  # may come before the search for the last keystroke finishes: it opens that search's best
    tmux.wait_for("Root cause", "D8 · Parameters without a gradient")
    tmux.keys("Escape")
    tmux.wait_for("search the catalogue", "finishd reduction")  # back on the search, the query kept
    tmux.keys("C-o")
    # the path field, filled with the working directory and selected; a long path scrolls to its end in the
    # field, so look for its last 40 characters (the full path only fits in a shallow checkout)
    tmux.wait_for("Paste text", str(ROOT)[-40:])
    time.sleep(0.3)
    tmux.type(str(D8_LOG.relative_to(ROOT)))  # replaces the selected text
    tmux.wait_for("aux-head-unused-torchrun.log")
    tmux.keys("Enter")
    screen = tmux.wait_for("match", "D8", "evidence 1/", timeout=60)
    assert "Expected to have finished reduction" in screen
    tmux.keys("C-q")
    tmux.wait_for("EXITED=0")


def test_a_piped_log_is_read_before_the_terminal_is_taken(tmux):
    command = f"cat {shlex.quote(str(D8_LOG))} | {shlex.quote(str(BIN))} tui -"
    tmux.start(command)
    screen = tmux.wait_for("<stdin>", "D8", "evidence 1/", timeout=60)
    assert "match" in screen
    tmux.keys("n")  # keys reach the app through /dev/tty, not the exhausted pipe
    tmux.wait_for("evidence 2/")
    tmux.keys("C-q")
    tmux.wait_for("EXITED=0")


def test_diagnose_tui_opens_on_the_results(tmux):
    tmux.start(f"{shlex.quote(str(BIN))} diagnose --tui examples/rank-crash-then-timeout")  # run from ROOT
    screen = tmux.wait_for("D20", "failed first", "evidence 1/", timeout=60)
    assert "rank2.log" in screen
    tmux.keys("t")  # the rank timeline toggles
    tmux.keys("C-q")
    tmux.wait_for("EXITED=0")


def test_ctrl_s_on_a_hung_job_shows_where_its_ranks_wait(tmux, tmp_path):
    from hungjob import hung_job

    from gpudoctor.probes import stackdump

    if stackdump.py_spy() is None:
        pytest.skip("py-spy is not installed")
    with hung_job(tmp_path):
        tmux.start(shlex.quote(str(BIN)), cwd=tmp_path)  # the dumps' folder is made in the working directory
        tmux.wait_for("describe what you see")
        tmux.keys("C-s")
        tmux.wait_for("D21", "Collective inside", timeout=60)
        tmux.keys("C-q")
        tmux.wait_for("EXITED=0")
    folders = list(tmp_path.glob("gpudoctor-stacks-*"))
    assert len(folders) == 1 and sorted(p.name for p in folders[0].iterdir()) == ["rank0.py-spy.txt",
                                                                                   "rank1.py-spy.txt"]
