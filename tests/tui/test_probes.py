"""Probes: live rows, Esc kills the probe's whole process group (checked in /proc), results and the busbw chart."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.probes import runner
from gpudoctor.tui.screens.probes import ProbeScreen
from gpudoctor.tui.widgets.chart import BusbwChart

from .conftest import wait_until



def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is pgid, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(entry.name))
    return members


async def test_esc_kills_a_running_probe_and_leaves_no_process(make):
    pytest.importorskip("torch")
    app = make(probe_options={"max_bytes": 1 << 22})
    async with app.run_test(size=(80, 24)) as pilot:
        app.run_probes(["collectives"])
        await wait_until(pilot, lambda: isinstance(app.screen, ProbeScreen))
        screen = app.screen
        await wait_until(pilot, lambda: bool(runner._live), what="the probe process", timeout=30)
        pgids = list(runner._live)
        # wait for the ranks it forks, so that the kill has a group to sweep, not just one process
        await wait_until(pilot, lambda: any(len(group_members(g)) > 1 for g in pgids), what="its ranks", timeout=60)
        assert not screen.finished
        await pilot.press("escape")
        await wait_until(pilot, lambda: screen.finished, what="the cancelled run to end", timeout=30)
        await wait_until(pilot, lambda: not any(group_members(g) for g in pgids), what="no process left", timeout=10)
        assert screen.cancelled
        assert screen.results["collectives"].status.value == "errored"
        assert "killed" in str(screen.query_one("#probe-table").get_cell("collectives", "result"))
        assert not runner._live
        await pilot.press("escape")  # a finished run: esc goes back
        await wait_until(pilot, lambda: not isinstance(app.screen, ProbeScreen), what="back")


async def test_collectives_probe_fills_the_table_and_draws_busbw(make):
    pytest.importorskip("torch")
    app = make(probe_options={"max_bytes": 1 << 16, "nproc": 2})
    async with app.run_test(size=(100, 40)) as pilot:
        app.run_probes(["collectives", "mtu"])
        await wait_until(pilot, lambda: isinstance(app.screen, ProbeScreen))
        screen = app.screen
        await wait_until(pilot, lambda: screen.finished, what="the collectives probe", timeout=180)
        result = screen.results["collectives"]
        assert result.status.value in ("ruled_out", "inconclusive", "confirmed"), result
        table = result.figures["table"]
        assert len(table) >= 3
        chart = screen.query_one(BusbwChart)
        assert chart.points == len(table)
        assert str(screen.query_one("#probe-table").get_cell("mtu", "result")) == "skip"  # needs --peer
        assert "--peer" in screen.results["mtu"].summary
        app.save_screenshot("/tmp/probes.svg")
