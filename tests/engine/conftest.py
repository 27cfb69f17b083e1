"""Fixtures of the engine tests: the built-in catalogue, loaded once per module (a module's own fixture wins)."""
from __future__ import annotations

import pytest

from gpudoctor.kb.catalog import load_catalog


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(use_cache=False)
