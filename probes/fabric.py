"""The NVSwitch fabric (MN1): nvidia-fabricmanager active, its version equal to the driver's, fabric state complete."""
from __future__ import annotations

import re
from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, inconclusive, ruled_out, skipped

SERVICE = "nvidia-fabricmanager"
VERSION = re.compile(r"([0-9]+\.[0-9]+(?:\.[0-9]+)?)")


def nvswitches(options: Mapping) -> list[str]:
    """NVSwitch devices the nvswitch driver exposes (HGX/DGX A100 and H100 baseboards)."""
    found = []
    dev = hostinfo.under_root(options, "/dev")
    try:
        found += sorted(p.name for p in dev.iterdir() if re.fullmatch(r"nvidia-nvswitch[0-9]+", p.name))
    except OSError:
        pass
    proc = hostinfo.under_root(options, "/proc/driver/nvidia-nvswitch/devices")
    try:
        found += sorted(f"nvswitch {p.name}" for p in proc.iterdir())
    except OSError:
        pass
    return found


def fabric_states(nvidia_smi_q: str) -> list[tuple[str, str]]:
    """(State, Status) of each GPU's "Fabric" block in `nvidia-smi -q`."""
    states = []
    for block in re.split(r"\n(?=\s*Fabric\s*$)", nvidia_smi_q, flags=re.M)[1:]:
        state = re.search(r"^\s*State\s*:\s*(.+?)\s*$", block, re.M)
        status = re.search(r"^\s*Status\s*:\s*(.+?)\s*$", block, re.M)
        states.append((state.group(1) if state else "?", status.group(1) if status else "?"))
    return states


def service_state(options: Mapping) -> tuple[str, str]:
    """('active'|'inactive'|'failed'|'unknown', how we know); without systemd, a running nv-fabricmanager counts."""
    out = hostinfo.run_command(options, ["systemctl", "is-active", SERVICE])
    if out and out.returncode is not None and out.stdout.strip() in ("active", "inactive", "failed", "activating"):
        return out.stdout.strip(), f"systemctl is-active {SERVICE}: {out.stdout.strip()}"
    for pid_dir in hostinfo.under_root(options, "/proc").glob("[0-9]*"):
        comm = hostinfo.read_text(pid_dir / "comm", "")
        if comm and comm.startswith("nv-fabricmanage"):  # comm is cut at 15 characters
            return "active", f"nv-fabricmanager running as pid {pid_dir.name} (no systemd answer)"
    return "unknown", "systemctl gave no answer and no nv-fabricmanager process runs"


def fabric_manager_version(options: Mapping) -> str | None:
    out = hostinfo.run_command(options, ["nv-fabricmanager", "--version"])
    if out and out.returncode == 0:
        m = VERSION.search(out.stdout + out.stderr)
        if m:
            return m.group(1)
    return None


def probe(options: Mapping) -> Result:
    driver = hostinfo.driver_version(options)
    switches = nvswitches(options)
    if not switches:
        return skipped("no NVSwitch on this machine (no /dev/nvidia-nvswitch*): fabric manager is not needed",
                       [f"driver {driver or 'not found'}"], {"driver": driver})
    evidence = [f"NVSwitch devices: {', '.join(switches[:6])}{' ...' if len(switches) > 6 else ''}",
                f"driver {driver or 'unknown'}"]
    figures = {"driver": driver, "nvswitches": len(switches)}
    problems = []
    state, how = service_state(options)
    evidence.append(how)
    figures["service"] = state
    if state in ("inactive", "failed"):
        problems.append(f"{SERVICE} is {state}: NCCL init will hang on this node (systemctl restart {SERVICE})")
    version = fabric_manager_version(options)
    figures["fabric_manager"] = version
    evidence.append(f"fabric manager {version or 'version unknown (nv-fabricmanager --version)'}")
    if version and driver and version != driver:
        problems.append(f"fabric manager {version} differs from driver {driver}: it refuses to start or "
                        "fails to train the fabric; install the matching nvidia-fabricmanager package")
    smi = hostinfo.run_command(options, ["nvidia-smi", "-q"], timeout=15)
    states = fabric_states(smi.stdout) if smi and smi.returncode == 0 else []
    bad = [(n, s) for n, s in enumerate(states) if not (s[0].lower() == "completed" and s[1].lower() == "success")
           and s[0].lower() not in ("n/a", "not supported")]
    if states:
        evidence.append("fabric state per GPU: " + ", ".join(f"{n}:{s[0]}/{s[1]}" for n, s in enumerate(states)))
        figures["fabric_states"] = [list(s) for s in states]
    if bad:
        n, (st, status) = bad[0]
        problems.append(f"GPU {n} fabric state is {st} ({status}), not Completed/Success")
    if problems:
        return confirmed(problems[0], evidence + [f"MN1: {p}" for p in problems[1:]], figures, ("MN1",))
    if state != "active" or not states:
        return inconclusive("NVSwitch present but the fabric manager's health could not be read", evidence,
                            figures, ("MN1",))
    return ruled_out(f"{SERVICE} active, version {version or '?'} matches the driver, fabric Completed",
                     evidence, figures, ("MN1",))
