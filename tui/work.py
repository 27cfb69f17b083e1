"""The one way the TUI runs blocking work: a thread worker owned by the app, errors handled in one place."""
from __future__ import annotations

from typing import Callable

from textual.dom import DOMNode
from textual.worker import Worker, get_current_worker  # noqa: F401  (re-exported for the screens' workers)


class Cancelled(Exception):
    """Raised inside a worker's callbacks when the user cancelled it; never reported as an error.

    A thread cannot be interrupted: a worker checks `get_current_worker().is_cancelled` between steps (the log
    index between reads); the diagnosis runs in a child process that its worker kills (tui/diagnose_child.py)."""


def background(node: DOMNode, fn: Callable[[], object], *, name: str, exclusive: bool = True) -> Worker:
    """Run fn in a thread. Workers of the same name and node replace each other when exclusive.

    The app owns every worker, so one handler (GpuDoctorApp.on_worker_state_changed) sees every failure;
    it tells the user and posts WorkFailed back to `node`.
    """
    app = node.app
    group = f"{name}:{id(node)}"
    worker = app.run_worker(fn, name=name, group=group, exclusive=exclusive, thread=True, exit_on_error=False)
    app.worker_owners[worker] = node
    return worker
