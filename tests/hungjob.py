"""Real hung jobs for the tests: two gloo ranks under torchrun. "rank0-save": rank 0 in a barrier inside its
checkpoint save (which only rank 0 runs), rank 1 waiting in all_reduce (D21). "desync": rank 0 in all_reduce,
rank 1 in broadcast (D19). Stopped, ranks included, when the test ends."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

# Each rank writes a file just before its collective, so a test looks at them only once both are waiting.
HUNG_JOB = """
import os, sys
from datetime import timedelta
import torch, torch.distributed as dist

def save_checkpoint(state, ready):
    torch.save(state, os.path.join(sys.argv[1], "ckpt.pt"))
    open(ready, "w").close()
    dist.barrier()

def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank = dist.get_rank()
    ready = os.path.join(sys.argv[1], f"ready{rank}")
    if rank == 0:
        save_checkpoint({"w": torch.ones(2)}, ready)
    open(ready, "w").close()
    t = torch.ones(1)
    dist.all_reduce(t)

main()
"""
DESYNC_JOB = """
import os, sys
from datetime import timedelta
import torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=300))
rank = dist.get_rank()
t = torch.ones(4)
open(os.path.join(sys.argv[1], f"ready{rank}"), "w").close()
if rank == 0:
    dist.all_reduce(t)
else:
    dist.broadcast(t, src=0)
"""
JOBS = {"rank0-save": HUNG_JOB, "desync": DESYNC_JOB}
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@contextlib.contextmanager
def hung_job(folder, kind: str = "rank0-save"):
    """The job, started in folder, once both ranks wait in their collectives."""
    script = folder / "train.py"
    script.write_text(textwrap.dedent(JOBS[kind]))
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    env["TMPDIR"] = str(folder)
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                             str(script), str(folder)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not all((folder / f"ready{r}").exists() for r in (0, 1)):
            assert proc.poll() is None, "the job ended before hanging"
            assert time.monotonic() < deadline, "the ranks never reached their collectives"
            time.sleep(0.1)
        time.sleep(0.5)  # from the file to the collective's wait
        yield proc
    finally:
        _stop(proc, str(folder))


def _stop(proc: subprocess.Popen, marker: str) -> None:
    """torchrun starts each rank in a session of its own: SIGTERM lets it stop them; whatever is left is killed."""
    from gpudoctor.probes import stackdump

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for rank in stackdump.find_training_processes():
        if marker in rank.command:
            os.kill(rank.pid, signal.SIGKILL)
