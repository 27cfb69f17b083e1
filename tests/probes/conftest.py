"""Fixtures for the probes' tests: fabricated /sys and /proc trees, stand-in commands, a child PYTHONPATH."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture
def sysroot(tmp_path):
    root = tmp_path / "root"
    (root / "sys/class/net").mkdir(parents=True)
    return root


@pytest.fixture
def bin_dir(tmp_path):
    path = tmp_path / "bin"
    path.mkdir()
    return path


@pytest.fixture
def fixture_env():
    """The environment a probe child needs to import tests/probes/probe_fixtures.py."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    return env
