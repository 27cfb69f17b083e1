"""Property tests: applying a fix twice equals applying it once, on scripts with arbitrary comments and commands."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor.engine.fixes import NotApplicable
from gpudoctor.engine.fixes.launch import parse_launch, rewrite
from gpudoctor.engine.fixes.patches import get
from gpudoctor.kb.catalog import load_catalog

DATA = Path(__file__).resolve().parent.parent / "data" / "fixes"
CATALOG = load_catalog(use_cache=False)
PATCHED = [(p, a.param("patch")) for p in sorted(DATA.glob("*/*.py"))
           for a in CATALOG.get(p.parent.name).fix_actions if a.kind == "patch"]


def _with_comments(text: str, picks: list[tuple[int, str]]) -> str:
    """Insert comment and blank lines before some lines, indented like the line they precede."""
    lines = text.splitlines(keepends=True)
    for index, comment in sorted(picks, reverse=True):
        i = index % (len(lines) + 1)
        nxt = lines[i] if i < len(lines) else ""
        indent = nxt[: len(nxt) - len(nxt.lstrip())] if nxt.strip() else ""
        lines.insert(i, f"{indent}# {comment}\n" if comment else "\n")
    return "".join(lines)


def _apply(name: str, text: str) -> str:
    try:
        return get(name)(text, "train.py", {})[0]
    except NotApplicable:
        return text


comments = st.lists(st.tuples(st.integers(0, 400), st.text(st.characters(codec="utf-8", categories=("L", "N", "Zs")),
                                                              max_size=20)), max_size=6)


@pytest.mark.parametrize("source, patch", PATCHED, ids=[f"{p.parent.name}/{p.name}" for p, _ in PATCHED])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=comments)
def test_patch_twice_equals_once(source, patch, picks):
    text = _with_comments(source.read_text(encoding="utf-8"), picks)
    ast.parse(text)
    once = _apply(patch, text)
    ast.parse(once)
    assert _apply(patch, once) == once
    for _, comment in picks:  # comments survive the patch
        if comment.strip():
            assert f"# {comment}" in once


words = st.text(st.characters(codec="ascii", exclude_categories=("Cc",)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(args=st.lists(words, max_size=5),
       launcher=st.sampled_from(["python", "python -u", "torchrun --nproc-per-node=2", "accelerate launch",
                                 "deepspeed --num_gpus=2"]),
       how=st.sampled_from(["torchrun-standalone", "torchrun-multinode", "free-port", "accelerate-multi-gpu",
                            "deepspeed-launcher", "nproc-to-gpus"]))
def test_rewrite_twice_equals_once_and_keeps_the_arguments(args, launcher, how):
    import shlex

    cmd = f"{launcher} train.py {shlex.join(args)}".strip()
    facts = {"free_port": 29999, "nproc": 2, "master_addr": "h0"}
    try:
        once, _ = rewrite(cmd, how, facts)
    except NotApplicable:
        once = cmd
    assert parse_launch(once).args[: len(args)] == args
    try:
        twice, _ = rewrite(once, how, facts)
    except NotApplicable:
        twice = once
    assert shlex.split(twice) == shlex.split(once)
