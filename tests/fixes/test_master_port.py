"""D4's patch on a script that fixes MASTER_PORT: two real jobs on this machine (gloo, one rank each) collide on the
fixed port; after the patch the second job runs on the port it is given, while the first still holds its default."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.patches import get
from gpudoctor.engine.lint import lint_source

PATCH = get("master-port-setdefault")
JOB = """import os, sys, time
import torch.distributed as dist
os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ["MASTER_PORT"] = "{port}"
dist.init_process_group("gloo", rank=0, world_size=1)
print("up on", os.environ["MASTER_PORT"], flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(script, stop, env=None):
    return subprocess.Popen([sys.executable, str(script), str(stop)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})


def _wait_up(proc):
    line = proc.stdout.readline()
    assert line.startswith("up on"), proc.stderr.read()
    return line.split()[-1]


@pytest.mark.timeout(120)
def test_a_second_job_collides_on_the_fixed_port_and_runs_on_its_own_after_the_patch(tmp_path):
    port = _free_port()
    script = tmp_path / "train.py"
    script.write_text(JOB.format(port=port))
    assert [f.rule for f in lint_source(script.read_text(), "train.py", select=["D4"]).findings] == ["fixed-master-port"]
    stop = tmp_path / "stop"
    first = _start(script, stop)
    try:
        assert _wait_up(first) == str(port)
        second = subprocess.run([sys.executable, str(script), str(stop)], capture_output=True, text=True, timeout=90)
        assert second.returncode != 0
        assert "address already in use" in second.stderr.lower() or "EADDRINUSE" in second.stderr
        after, notes = PATCH(script.read_text(), str(script), {})
        script.write_text(after)
        assert not lint_source(after, "train.py", select=["D4"]).findings
        other = _free_port()
        third = _start(script, stop, {"MASTER_PORT": str(other)})
        assert _wait_up(third) == str(other)
        stop.write_text("done")
        assert third.wait(timeout=60) == 0
    finally:
        stop.write_text("done")
        first.wait(timeout=60)
    assert first.returncode == 0
    assert "MASTER_PORT=" in notes[0]


def test_only_literal_ports_in_os_environ_are_rewritten():
    text = ('import os\nfrom os import environ\nos.environ["MASTER_PORT"] = str(29500); x = 1\n'
            'environ["MASTER_PORT"] = "29501"\nos.environ["MASTER_PORT"] = str(args.port)\n')
    after, _ = PATCH(text, "t.py", {})
    assert after == ('import os\nfrom os import environ\nos.environ.setdefault("MASTER_PORT", str(29500)); x = 1\n'
                     'environ.setdefault("MASTER_PORT", "29501")\nos.environ["MASTER_PORT"] = str(args.port)\n')
    with pytest.raises(NotApplicable, match="no os.environ"):
        PATCH('import os\nos.environ.setdefault("MASTER_PORT", "29500")\n', "t.py", {})
