"""Every probe's declaration, and lookups by probe id; which entries a probe speaks to is in the catalogue."""
from __future__ import annotations

from gpudoctor.probes.base import Probe

_P = "gpudoctor.probes"

PROBES: tuple[Probe, ...] = (
    Probe("env", "launch environment contract (RANK, LOCAL_RANK, WORLD_SIZE, devices)", f"{_P}.env:probe",
          timeout_s=30, scope="job"),
    Probe("port", "rendezvous port free (MASTER_PORT, default 29500)", f"{_P}.port:probe", timeout_s=10),
    Probe("launchers", "accelerate config, DeepSpeed hostfile and ds_config.json", f"{_P}.launchers:probe",
          timeout_s=20),
    Probe("nic", "network interfaces NCCL would pick (NCCL_SOCKET_IFNAME, IB)", f"{_P}.nic:probe", timeout_s=10),
    Probe("mtu", "MTU along the path to a peer (jumbo frames)", f"{_P}.mtu:probe", timeout_s=20),
    Probe("shm", "/dev/shm size and free space for NCCL's shared-memory transport", f"{_P}.shm:probe", timeout_s=10),
    Probe("hostmem", "host RAM per local rank, memory cgroup limit, OOM-killer kills", f"{_P}.hostmem:probe",
          timeout_s=10),
    Probe("ckptdir", "checkpoint directory on storage every node shares (multi-node saves and resumes)",
          f"{_P}.ckptdir:probe", timeout_s=10),
    Probe("p2p", "GPU peer-to-peer: advertised pairs, IOMMU mode, a real peer copy", f"{_P}.p2p:probe",
          timeout_s=40, needs=("cuda",)),
    Probe("fabric", "NVSwitch fabric manager running, version equal to the driver's", f"{_P}.fabric:probe",
          timeout_s=20, needs=("cuda",)),
    Probe("gpuhealth", "GPU hardware health: uncorrectable ECC errors, failed row remaps, lost GPUs",
          f"{_P}.gpuhealth:probe", timeout_s=40, needs=("cuda",)),
    Probe("timeouts", "collective timeouts and async error handling for a dead rank", f"{_P}.timeouts:probe",
          timeout_s=10),
    Probe("versions", "torch, CUDA, NCCL, driver, DeepSpeed, accelerate versions", f"{_P}.versions:probe",
          timeout_s=30),
    Probe("collectives", "all_reduce correctness, bandwidth sweep, straggler barrier", f"{_P}.collectives:probe",
          timeout_s=180, needs=("torch",), scope="job"),
    Probe("desync", "mismatched collectives are reported and time out promptly", f"{_P}.desync:probe",
          timeout_s=60, needs=("torch",), scope="once"),
)

_BY_ID = {p.id: p for p in PROBES}


def ids() -> list[str]:
    return [p.id for p in PROBES]


def get(probe_id: str) -> Probe | None:
    return _BY_ID.get(probe_id.strip().lower())


def probes_for(catalog, entry_id: str) -> list[Probe]:
    """The probes a catalogue entry lists in its YAML `probes:` (the one place that mapping lives)."""
    return [probe for probe in map(get, catalog.probes_of(entry_id)) if probe is not None]


def entries_for(catalog, probe_id: str) -> list[str]:
    """The catalogue entries that list a probe, in catalogue order."""
    return [entry_id for entry_id, probes in catalog.probe_map().items() if probe_id in probes]
