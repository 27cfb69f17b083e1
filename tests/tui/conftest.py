"""TUI test helpers: the catalogue loaded once, the app from make_app(), and a poll for background work."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "logs"
EXAMPLE = ROOT / "examples" / "rank-crash-then-timeout"


@pytest.fixture(scope="session")
def catalog():
    from gpudoctor.kb.catalog import load_catalog

    return load_catalog(use_cache=False)


@pytest.fixture
def make(catalog):
    from gpudoctor.tui import make_app

    def build(**kwargs):
        return make_app(catalog, **kwargs)

    return build


async def wait_until(pilot, predicate, timeout: float = 20.0, what: str = "condition") -> None:
    """Let the app run until predicate() holds: workers finish in their own time."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)
    await pilot.pause()  # let a screen that just appeared finish composing

