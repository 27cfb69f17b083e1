"""Probe functions that misbehave on purpose, for the runner's tests (imported by the child via PYTHONPATH)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

from gpudoctor.probes.base import ruled_out


def ok(options):
    print("noise on stdout that must not corrupt the result")
    os.write(1, b"more noise, straight to fd 1\n")
    return ruled_out("fine", evidence=["line"], figures={"answer": 42}, entries=("D4",))


def hang(options):
    """Start a grandchild that holds a listening port, record both pids and the port, then never return."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], pass_fds=(listener.fileno(),))
    with open(options["record"], "w") as f:
        json.dump({"child": os.getpid(), "grandchild": grandchild.pid, "port": port}, f)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a stubborn probe: only SIGKILL stops it
    while True:
        time.sleep(1)


def abort(options):
    os.abort()


def boom(options):
    raise ValueError("this probe is broken")


def not_a_result(options):
    return {"status": "confirmed"}


def exit_quietly(options):
    os._exit(3)
