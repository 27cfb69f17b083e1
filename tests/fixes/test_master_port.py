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
# the other ways scripts fix the port (QA23 L2): a name bound to a number, os.environ.update, a tcp:// init_method
BY_NAME = JOB.replace('os.environ["MASTER_PORT"] = "{port}"', 'PORT = {port}\nos.environ["MASTER_PORT"] = str(PORT)')
BY_UPDATE = JOB.replace('os.environ["MASTER_ADDR"] = "127.0.0.1"\nos.environ["MASTER_PORT"] = "{port}"',
                        'os.environ.update({{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "{port}"}})')
BY_URL = (JOB.replace('os.environ["MASTER_ADDR"] = "127.0.0.1"\nos.environ["MASTER_PORT"] = "{port}"\n', "")
          .replace('init_process_group("gloo", ', 'init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", ')
          .replace('os.environ["MASTER_PORT"], flush', 'os.environ.get("MASTER_PORT", "{port}"), flush'))


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
@pytest.mark.parametrize("job", [JOB, BY_NAME, BY_UPDATE, BY_URL], ids=["literal", "name", "update", "url"])
def test_a_second_job_collides_on_the_fixed_port_and_runs_on_its_own_after_the_patch(tmp_path, job):
    port = _free_port()
    script = tmp_path / "train.py"
    script.write_text(job.format(port=port))
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


def test_a_name_bound_to_two_numbers_or_to_an_argument_is_not_a_fixed_port():
    text = ('import os\nPORT = 29500\nif fast:\n    PORT = 29600\nos.environ["MASTER_PORT"] = str(PORT)\n'
            'P = args.port\nos.environ.update(MASTER_PORT=str(P))\n'
            'dist.init_process_group("nccl", init_method="env://")\n'
            'dist.init_process_group("nccl", init_method=f"tcp://{host}:{port}")\n')
    assert not lint_source(text, "t.py", select=["D4"]).findings
    with pytest.raises(NotApplicable, match="no os.environ"):
        PATCH(text, "t.py", {})


def test_update_keeps_its_other_keys_and_a_url_keeps_its_host():
    text = ('import torch.distributed as dist\nimport os\nos.environ.update(MASTER_ADDR="h", MASTER_PORT="29500")\n'
            'os.environ.update({"MASTER_PORT": "29501"}, A="b")\n'
            "dist.init_process_group('nccl', init_method=f'tcp://{host}:23456')\n")
    found = lint_source(text, "t.py", select=["D4"]).findings
    assert [f.line for f in found] == [3, 4, 5]
    after, _ = PATCH(text, "t.py", {})
    assert after == ('import torch.distributed as dist\nimport os\nos.environ.update(MASTER_ADDR="h")\n'
                     'os.environ.setdefault("MASTER_PORT", "29500")\nos.environ.update(A="b")\n'
                     'os.environ.setdefault("MASTER_PORT", "29501")\n'
                     "dist.init_process_group('nccl', init_method=f'tcp://{host}:{os.environ.get(\"MASTER_PORT\", "
                     "\"23456\")}')\n")
    assert not lint_source(after, "t.py", select=["D4"]).findings
