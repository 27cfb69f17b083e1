"""Entry view: the Markdown `show --markdown` prints, related entries as links, the entry's probes as an action."""
from __future__ import annotations

import io

from textual.widgets import Button

from gpudoctor.main import main
from gpudoctor.tui.screens.entry import EntryScreen
from gpudoctor.tui.screens.probes import ProbeScreen

from .conftest import wait_until


async def test_entry_shows_the_same_markdown_as_show(make, catalog):
    out = io.StringIO()
    assert main(["show", "D8", "--markdown"], stdout=out, stderr=io.StringIO()) == 0
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_entry("d08")  # forgiving ids, as on the command line
        await wait_until(pilot, lambda: isinstance(app.screen, EntryScreen))
        assert app.screen.markdown_source == out.getvalue()


async def test_related_link_opens_the_related_entry(make, catalog):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_entry("D8")
        await wait_until(pilot, lambda: isinstance(app.screen, EntryScreen))
        related = [r.id for r in catalog.entries["D8"].related]
        buttons = [str(b.label) for b in app.screen.query(Button) if b.has_class("link")]
        assert buttons == related
        await pilot.press("r", "enter")
        await wait_until(pilot, lambda: getattr(app.screen, "entry_id", None) == related[0], what="related entry")
        await pilot.press("escape")
        await wait_until(pilot, lambda: getattr(app.screen, "entry_id", None) == "D8", what="back to D8")


async def test_probe_action_opens_the_entrys_probes(make, catalog):
    entry = next(e for e in catalog if e.probes == ("port",))
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_entry(entry.id)
        await wait_until(pilot, lambda: isinstance(app.screen, EntryScreen))
        await pilot.press("p")
        await wait_until(pilot, lambda: isinstance(app.screen, ProbeScreen))
        screen = app.screen
        assert [p.id for p in screen.probes] == ["port"]
        await wait_until(pilot, lambda: screen.finished, what="the port probe")
        assert screen.results["port"].status.value in ("ruled_out", "confirmed")
