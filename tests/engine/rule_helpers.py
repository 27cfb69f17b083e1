"""What the rule tests share: a diagnosis of a text, its matches and its guesses (the `catalog` fixture is in
conftest.py beside this)."""
from __future__ import annotations

import io

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import Source


def run(catalog, text: str):
    return diagnose(catalog, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))


def matches(d):
    return [f.id for f in d.findings if f.tier == "match"]


def possible(d):
    return [f.id for f in d.findings if f.tier == "possible"]
