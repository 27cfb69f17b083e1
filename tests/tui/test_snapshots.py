"""One snapshot per screen at 80x24 (and the search in the light theme); SVGs under __snapshots__."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.tui.screens.confirm import ConfirmScreen
from gpudoctor.tui.screens.entry import EntryScreen
from gpudoctor.tui.screens.fix import FixScreen
from gpudoctor.tui.screens.help import HelpScreen
from gpudoctor.tui.screens.lint import LintScreen
from gpudoctor.tui.screens.logs import LogScreen
from gpudoctor.tui.screens.open import OpenScreen
from gpudoctor.tui.screens.probes import ProbeScreen
from gpudoctor.tui.widgets.logview import LogView

from .conftest import ROOT, wait_until

SIZE = (80, 24)


def steady(app) -> None:
    """No blinking cursors: a picture taken mid-blink would differ from run to run."""
    from textual.widgets import Input, TextArea

    for screen in app.screen_stack:
        for widget in screen.query(Input):
            widget.cursor_blink = False
        for widget in screen.query(TextArea):
            widget.cursor_blink = False


@pytest.fixture(autouse=True)
def _in_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # paths on screen are relative, so the pictures do not depend on the checkout
    monkeypatch.delenv("NO_COLOR", raising=False)  # the pictures show the themes' colours


def test_search_screen(snap_compare, make):
    async def before(pilot):
        await pilot.press(*"hangs at the end of the epoch")
        await wait_until(pilot, lambda: pilot.app.screen.shown_query == "hangs at the end of the epoch")
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


def test_search_screen_light_theme(snap_compare, make):
    async def before(pilot):
        pilot.app.theme = "textual-light"
        await pilot.press(*"address already in use")
        await wait_until(pilot, lambda: pilot.app.screen.shown_query == "address already in use")
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


def test_entry_screen(snap_compare, make):
    async def before(pilot):
        pilot.app.open_entry("D8")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, EntryScreen))
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


async def settled(pilot) -> None:
    """The log screen once the diagnosis is in, the file indexed and the view on the first evidence line."""
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, LogScreen))
    screen = pilot.app.screen
    log = screen.query_one(LogView)
    await wait_until(pilot, lambda: screen.diagnosis is not None and log.logfile is not None and log.logfile.complete
                     and log.lines_known == log.logfile.line_count)
    line = next(ev.line for ev in screen.diagnosis.findings[0].evidence if ev.line > 0)
    await wait_until(pilot, lambda: log.cursor == line and line in log.rendered_lines, what="the evidence in view")
    await pilot.pause(0.3)


def test_log_screen(snap_compare, make):
    async def before(pilot):
        pilot.app.open_logs(["tests/data/logs/D8/aux-head-unused-torchrun.log"])
        await settled(pilot)
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


def test_log_screen_per_rank_timeline(snap_compare, make):
    async def before(pilot):
        pilot.app.open_logs(["examples/rank-crash-then-timeout"])
        await settled(pilot)
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


def test_probe_screen(snap_compare, make):
    async def before(pilot):
        pilot.app.run_probes(["fabric"])  # needs an NVIDIA driver: skipped here without starting a process
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, ProbeScreen) and pilot.app.screen.finished)
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


def test_open_screen(snap_compare, make):
    async def before(pilot):
        # a folder that does not grow with the collected logs (the snapshot lists its files)
        pilot.app.push_screen(OpenScreen(Path("examples/rank-crash-then-timeout")))
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, OpenScreen))
        tree = pilot.app.screen.query_one("#open-tree")
        listed = len(list(Path("examples/rank-crash-then-timeout").iterdir()))
        await wait_until(pilot, lambda: len(tree.root.children) == listed, what="the tree, loaded in its own worker")
        await pilot.pause(1.0)
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


def test_help_screen(snap_compare, make):
    async def before(pilot):
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


def test_confirm_screen(snap_compare, make):
    async def before(pilot):
        pilot.app.push_screen(ConfirmScreen("Apply 1 edit to train.py?", "a backup is kept; u undoes it"))
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen))
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


def test_fix_screen(snap_compare, make):
    async def before(pilot):
        pilot.app.open_fix("D21", script="tests/data/fixes/D21/eval_on_rank0.py")  # planning never writes
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, FixScreen) and pilot.app.screen.plan is not None)
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(), terminal_size=SIZE, run_before=before)


def test_lint_screen(snap_compare, make):
    async def before(pilot):
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, LintScreen) and pilot.app.screen.result
                         is not None and pilot.app.screen.logfile is not None)
        view, line = pilot.app.screen.query_one(LogView), pilot.app.screen.result.findings[0].line
        await wait_until(pilot, lambda: view.cursor == line and line in view.rendered_lines, what="the finding")
        await pilot.pause(0.3)
        steady(pilot.app)
        await pilot.pause(0.1)

    assert snap_compare(make(script="tests/data/fixes/D21/eval_on_rank0.py"), terminal_size=SIZE, run_before=before)
