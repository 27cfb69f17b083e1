"""Every probe's declaration, and lookups by probe id and by the catalogue entry a probe confirms."""
from __future__ import annotations

import re

from gpudoctor.probes.base import Probe

_P = "gpudoctor.probes"

PROBES: tuple[Probe, ...] = (
    Probe("env", "launch environment contract (RANK, LOCAL_RANK, WORLD_SIZE, devices)", ("D1", "D3"),
          f"{_P}.env:probe", timeout_s=30, scope="job"),
    Probe("port", "rendezvous port free (MASTER_PORT, default 29500)", ("D4",), f"{_P}.port:probe", timeout_s=10),
    Probe("launchers", "accelerate config, DeepSpeed hostfile and ds_config.json",
          ("D5", "D6", "D16", "D17", "D18"), f"{_P}.launchers:probe", timeout_s=20),
    Probe("nic", "network interfaces NCCL would pick (NCCL_SOCKET_IFNAME, IB)", ("MN2",), f"{_P}.nic:probe",
          timeout_s=10),
    Probe("mtu", "MTU along the path to a peer (jumbo frames)", ("MN4",), f"{_P}.mtu:probe", timeout_s=20),
    Probe("fabric", "NVSwitch fabric manager running, version equal to the driver's", ("MN1",),
          f"{_P}.fabric:probe", timeout_s=20, needs=("cuda",)),
    Probe("timeouts", "collective timeouts and async error handling for a dead rank", ("MN3", "D19", "D20"),
          f"{_P}.timeouts:probe", timeout_s=10),
    Probe("versions", "torch, CUDA, NCCL, driver, DeepSpeed, accelerate versions", (), f"{_P}.versions:probe",
          timeout_s=30),
    Probe("collectives", "all_reduce correctness, bandwidth sweep, straggler barrier",
          ("D19", "D20", "MN2", "MN3", "MN4"), f"{_P}.collectives:probe", timeout_s=180, needs=("torch",),
          scope="job"),
    Probe("desync", "mismatched collectives are reported and time out promptly", ("D9", "D19", "D21", "D22"),
          f"{_P}.desync:probe", timeout_s=60, needs=("torch",), scope="once"),
)

_BY_ID = {p.id: p for p in PROBES}


def normalize_entry_id(text: str) -> str:
    """'d4', 'D04', 'mn-2' -> 'D4', 'MN2' (the catalogue's own rule, kept here so probes need no kb import)."""
    m = re.match(r"^\s*([A-Za-z]+)[\s_-]*0*([0-9]+)\s*$", text)
    return f"{m.group(1).upper()}{int(m.group(2))}" if m else text.strip().upper()


def ids() -> list[str]:
    return [p.id for p in PROBES]


def get(probe_id: str) -> Probe | None:
    return _BY_ID.get(probe_id.strip().lower())


def probes_for(entry_id: str) -> list[Probe]:
    """The probes that confirm or rule out a catalogue entry ('d4' and 'D04' name D4)."""
    key = normalize_entry_id(entry_id)
    return [p for p in PROBES if key in p.confirms]


def entry_map() -> dict[str, list[str]]:
    """entry id -> probe ids, for the catalogue's `probes` field."""
    mapping: dict[str, list[str]] = {}
    for probe in PROBES:
        for entry in probe.confirms:
            mapping.setdefault(entry, []).append(probe.id)
    return mapping
