"""Symptom search: results re-rank as you type through kb.search, typos tolerated, Enter opens the entry."""
from __future__ import annotations

from gpudoctor.tui.screens.entry import EntryScreen
from gpudoctor.tui.screens.search import SearchScreen

from .conftest import wait_until


async def test_typing_narrows_the_list_and_enter_opens_d8(make, catalog):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        assert screen.result_ids == [e.id for e in catalog]  # empty query: every entry
        await pilot.press(*"expected to have finished reduction")
        await wait_until(pilot, lambda: screen.query_text.endswith("reduction") and screen.last_search_s is not None
                         and screen.result_ids and screen.result_ids[0] == "D8", what="D8 on top")
        assert len(screen.result_ids) < len(catalog)
        # the same ranking the CLI prints: the catalogue's own search
        from gpudoctor.commands.search import MIN_SCORE

        expected = [h.id for h in catalog.search_index().search(screen.query_text, limit=30) if h.score >= MIN_SCORE]
        assert screen.result_ids == expected
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, EntryScreen), what="entry screen")
        assert app.screen.entry_id == "D8"


async def test_typos_are_tolerated_and_each_keystroke_updates(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        await pilot.press(*"adress already in use")
        await wait_until(pilot, lambda: screen.result_ids[:1] == ["D4"], what="D4 for a misspelt bind error")
        first = list(screen.result_ids)
        await pilot.press(*" nccl docker0")
        await wait_until(pilot, lambda: screen.result_ids != first, what="the list to change")
        await pilot.press("escape")
        await wait_until(pilot, lambda: screen.query_text == "", what="cleared query")
        await pilot.pause(0.1)
        assert len(screen.result_ids) == len(app.catalog)


async def test_no_match_says_so(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        await pilot.press(*"zzqx wvvq")
        await wait_until(pilot, lambda: screen.last_search_s is not None, what="a search")
        assert screen.result_ids == []
        assert "nothing matches" in str(screen.query_one("#preview").render())


async def test_down_then_enter_opens_the_highlighted_result(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        await pilot.press(*"port already in use")
        await wait_until(pilot, lambda: screen.last_search_s is not None and len(screen.result_ids) > 1)
        second = screen.result_ids[1]
        await pilot.press("down", "down", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, EntryScreen))
        assert app.screen.entry_id == second


async def test_command_palette_opens_an_entry(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"MN3")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, EntryScreen), what="entry from the palette")
        assert app.screen.entry_id == "MN3"


async def test_a_failing_worker_is_reported_once_and_the_screen_recovers(make, catalog, monkeypatch):
    class Broken:
        def search(self, query, limit=10):
            raise RuntimeError("index damaged")

    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        real = catalog.search_index()
        monkeypatch.setattr(catalog, "index", Broken())
        await pilot.press("x")
        await wait_until(pilot, lambda: any("index damaged" in str(n.message) for n in app._notifications),
                         what="the error notification")
        assert not screen.searching  # WorkFailed reached the screen: the next keystroke searches again
        monkeypatch.setattr(catalog, "index", real)
        await pilot.press(*"nccl")
        await wait_until(pilot, lambda: screen.shown_query == "xnccl", what="a search after the failure")
        assert sum("index damaged" in str(n.message) for n in app._notifications) == 1


async def test_rows_are_remade_for_the_new_width_after_a_resize(make):
    """QA23 T1: rows made at 80 columns stayed cut at 80 after the terminal grew."""
    from textual.widgets import OptionList

    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        await pilot.press(*"every rank prints and saves")
        await wait_until(pilot, lambda: screen.shown_query == "every rank prints and saves", what="results")

        def longest() -> int:
            results = screen.query_one("#results", OptionList)
            return max(len(str(results.get_option_at_index(i).prompt)) for i in range(results.option_count))

        narrow = longest()
        await pilot.resize_terminal(160, 40)
        await wait_until(pilot, lambda: longest() > narrow, what="wider rows")
        assert screen.shown_query == "every rank prints and saves"
