"""Timeouts and error handling (MN3, D19, D20): how long a dead rank would go unnoticed with this environment."""
from __future__ import annotations

from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, entry_ids, inconclusive, ruled_out
from gpudoctor.probes.versions import installed_version, version_tuple

# TORCH_NCCL_ASYNC_ERROR_HANDLING values, as ProcessGroupNCCL.hpp documents them
ERROR_MODES = {
    0: "no handling: the watchdog only logs; peers of a dead rank stay blocked",
    1: "tear down the process after aborting the communicators",
    2: "abort the communicators only; your loop must handle the error",
    3: "tear down the process without aborting the communicators",
}
MASKING_S = 1800  # MN3: at 30 minutes the symptom arrives long after the cause
NCCL_DEFAULT_MIN = 10  # kProcessGroupNCCLDefaultTimeout
OTHER_DEFAULT_MIN = 30  # kProcessGroupDefaultTimeout (gloo and older torch for every backend)


def probe(options: Mapping) -> Result:
    env = hostinfo.environ(options)
    torch_version = options.get("torch_version") or installed_version("torch")
    backend = options.get("backend") or ("nccl" if hostinfo.has_nvidia_driver(options) else "gloo")
    evidence, figures, problems, notes = [], {"backend": backend, "torch": torch_version}, [], []

    timeout_s, timeout_source = _timeout(options, backend, torch_version)
    figures["timeout_s"] = timeout_s
    evidence.append(f"collective timeout: {timeout_s / 60:g} min ({timeout_source})")

    if backend == "nccl":
        mode, mode_source = async_error_mode(env, torch_version)
        figures["async_error_handling"] = mode
        evidence.append(f"async error handling: {mode if mode is not None else '?'} ({mode_source}): "
                        f"{ERROR_MODES.get(mode, 'unknown value')}")
        blocking = env.get("TORCH_NCCL_BLOCKING_WAIT", env.get("NCCL_BLOCKING_WAIT", "0")).strip() == "1"
        if blocking:
            evidence.append("TORCH_NCCL_BLOCKING_WAIT=1: the waiting call raises at the timeout (slower steps)")
        if mode == 0 and not blocking:
            problems.append(("MN3", "async error handling is off: a dead rank leaves the others blocked "
                                    "indefinitely; unset it or set TORCH_NCCL_ASYNC_ERROR_HANDLING=3"))
        if "NCCL_ASYNC_ERROR_HANDLING" in env and "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in env:
            notes.append("NCCL_ASYNC_ERROR_HANDLING is the deprecated name (torch >= 2.2 reads "
                         "TORCH_NCCL_ASYNC_ERROR_HANDLING first)")
        buffer = env.get("TORCH_FR_BUFFER_SIZE", env.get("TORCH_NCCL_TRACE_BUFFER_SIZE"))
        dump = env.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "0").strip() == "1"
        evidence.append(f"flight recorder: buffer {buffer if buffer is not None else 'default'}; "
                        f"dump on timeout {'on' if dump else 'off'}")
        if not dump:
            notes.append("set TORCH_NCCL_DUMP_ON_TIMEOUT=1 (and TORCH_FR_BUFFER_SIZE=2000) so a timeout "
                         "dumps each rank's last collectives (D19)")
        figures["flight_recorder"] = {"buffer": buffer, "dump_on_timeout": dump}
    else:
        evidence.append(f"{backend}: a collective waiting on a dead rank raises in the caller at the timeout")

    debug = env.get("TORCH_DISTRIBUTED_DEBUG", "OFF").upper()
    evidence.append(f"TORCH_DISTRIBUTED_DEBUG={debug}")
    if debug == "DETAIL":
        notes.append("DETAIL checks every collective's fingerprint (extra collectives): for diagnosing a "
                     "hang, not for production (D19)")
    if not env.get("NCCL_DEBUG") and backend == "nccl":
        notes.append("NCCL_DEBUG is unset: with NCCL_DEBUG=INFO the node that stops logging first is the culprit")
    if timeout_s >= MASKING_S:
        problems.append(("MN3", f"a dead or stalled rank surfaces only after {timeout_s / 60:g} min: pass a "
                                "deliberate timeout= to init_process_group"))
    evidence += [f"note: {n}" for n in notes]
    detect = f"a dead rank is reported after {timeout_s / 60:g} min"
    if problems:
        entries = entry_ids([e for e, _ in problems] + ["D20"])
        evidence += [f"{e}: {t}" for e, t in problems[1:]]
        explicit = options.get("pg_timeout_s") is not None or problems[0][1].startswith("async")
        if explicit:
            return confirmed(problems[0][1], evidence, figures, entries)
        return inconclusive(f"a dead rank surfaces after the {timeout_s / 60:g} min default timeout",
                            evidence, figures, entries)
    # D20 (a rank that failed) is an event of the job, which no setting rules out: only MN3's masking is
    return ruled_out(f"{detect} ({backend})", evidence, figures, ("MN3",))


def async_error_mode(env: Mapping[str, str], torch_version: str | None) -> tuple[int | None, str]:
    for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"):
        if name in env:
            try:
                return int(env[name]), f"{name}={env[name]}"
            except ValueError:
                return None, f"{name}={env[name]!r} is not a number"
    if torch_version and version_tuple(torch_version) >= (2, 2):
        return 3, f"unset; torch {torch_version} defaults to 3 (torchrun sets 1)"
    return None, f"unset; torch {torch_version or '?'} default"


def _timeout(options: Mapping, backend: str, torch_version: str | None) -> tuple[float, str]:
    if options.get("pg_timeout_s") is not None:
        return float(options["pg_timeout_s"]), "as given"
    if backend == "nccl" and torch_version and version_tuple(torch_version) >= (2, 2):
        return NCCL_DEFAULT_MIN * 60.0, f"init_process_group default for nccl in torch {torch_version}"
    return OTHER_DEFAULT_MIN * 60.0, f"init_process_group default for {backend}"
