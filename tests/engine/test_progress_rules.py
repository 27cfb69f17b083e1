"""Ranks in step whose progress bars count different epoch lengths: D22 (loader length differs across ranks)."""
from __future__ import annotations

import io

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import Source
from gpudoctor.kb.catalog import load_catalog

CATALOG = load_catalog(use_cache=False)


def run(text: str):
    d = diagnose(CATALOG, [Source("<stdin>", None, None)], stdin=io.BytesIO(text.encode()))
    return [(f.id, f.tier) for f in d.findings]


def bar(n: int, total: int, elapsed: str, prefix: str = "") -> str:
    """A bar as tqdm's format_meter draws it: "{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}it/s]"."""
    return f"{prefix}{100 * n // total:3d}%|█████████▉| {n}/{total} [{elapsed}<00:02,  2.83it/s]\n"


def test_ranks_at_the_same_step_and_time_with_different_totals_are_d22():
    """accelerate #157: seven ranks, each bar at step 18679 after 1:50:07, totals 18682 to 18686."""
    text = "".join(bar(18679, total, "1:50:07") for total in (18686, 18683, 18682, 18684, 18686, 18685, 18684))
    found = run(text)
    assert found[0] == ("D22", "match") and ("D9", "possible") in found, found


def test_one_process_redrawing_its_bar_over_epochs_is_not_d22():
    """The same step with another total in a later epoch, after another elapsed time: one process's bucketed loader."""
    text = bar(120, 1000, "00:40", "Epoch 0: ") + bar(120, 1004, "05:41", "Epoch 1: ")
    assert ("D22", "match") not in run(text)


def test_a_train_and_an_eval_loop_at_the_same_moment_are_not_d22():
    text = bar(50, 2000, "01:10", "train: ") + bar(50, 60, "01:10", "eval: ")
    assert ("D22", "match") not in run(text)


def test_ranks_with_equal_totals_are_not_d22():
    text = "".join(bar(18679, 18686, "1:50:07") for _ in range(4))
    assert ("D22", "match") not in run(text)
