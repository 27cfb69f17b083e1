"""Shared fixtures: an isolated catalogue cache, a plain 80-column terminal, and CLI runners."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "gpudoctor-cache"
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(cache))
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("GPUDOCTOR_KB", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")


class Result:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:
        return f"Result(code={self.code}, out={self.out[:200]!r}, err={self.err[:200]!r})"


@pytest.fixture
def cli():
    """Run gpudoctor in-process through main(argv)."""
    from gpudoctor.main import main

    def run(*argv: str) -> Result:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), stdout=out, stderr=err)
        return Result(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def cli_proc():
    """Run gpudoctor as a real subprocess (python -m gpudoctor), optionally feeding stdin."""

    def run(*argv: str, input: bytes | None = None, env: dict | None = None, timeout: float = 60) -> Result:
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = subprocess.run(
            [sys.executable, "-m", "gpudoctor", *argv], input=input if input is not None else b"",
            capture_output=True, env=full_env, timeout=timeout, cwd=ROOT,
        )
        return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))

    return run
