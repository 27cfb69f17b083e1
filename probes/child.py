"""The child side of the runner: read one request from stdin, run the probe function, write its Result as JSON."""
from __future__ import annotations

import importlib
import json
import os
import sys
import traceback


def main() -> None:
    # The result travels over the original stdout; anything printed later (by the probe, torch or NCCL)
    # lands on stderr instead and cannot corrupt it.
    result_fd = os.dup(1)
    os.dup2(2, 1)
    from gpudoctor.probes.base import Result, errored

    try:
        request = json.loads(sys.stdin.read())
        module_name, _, function_name = request["target"].partition(":")
        function = getattr(importlib.import_module(module_name), function_name)
        result = function(request.get("options") or {})
        if not isinstance(result, Result):
            result = errored(f"the probe returned {type(result).__name__}, not a Result")
    except BaseException as exc:  # a probe bug must come back as Errored, not as a silent exit
        lines = traceback.format_exc().strip().splitlines()
        result = errored(f"{type(exc).__name__}: {exc}"[:300], evidence=lines[-6:])
    payload = json.dumps(result.to_dict(), default=str)
    with os.fdopen(result_fd, "w") as channel:
        channel.write(payload)
    sys.stderr.flush()
    # Skip interpreter teardown: torch's atexit hooks and lingering backend threads can hang it.
    os._exit(0)


if __name__ == "__main__":
    main()
