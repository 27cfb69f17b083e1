"""ctrl+s: a job hung on this machine, its ranks dumped with py-spy, the dumps' diagnosis opened."""
from __future__ import annotations

import pytest

from gpudoctor.probes import stackdump
from gpudoctor.tui.screens.logs import LogScreen

from .conftest import wait_until

pytestmark = pytest.mark.skipif(stackdump.py_spy() is None, reason="py-spy is not installed")


async def test_ctrl_s_dumps_a_hung_job_s_ranks_and_opens_their_diagnosis(make, tmp_path, monkeypatch):
    from hungjob import hung_job

    monkeypatch.chdir(tmp_path)  # the dumps' folder is made here
    with hung_job(tmp_path):
        app = make()
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None,
                             what="the dumps' diagnosis", timeout=60)
            top = app.screen.diagnosis.findings[0]
            assert (top.id, top.tier) == ("D21", "match")
    folders = list(tmp_path.glob("gpudoctor-stacks-*"))
    assert len(folders) == 1 and sorted(p.name for p in folders[0].iterdir()) == ["rank0.py-spy.txt",
                                                                                   "rank1.py-spy.txt"]
