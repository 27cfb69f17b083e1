"""A faulty GPU on this machine (MN8): uncorrectable ECC errors, rows the GPU failed to remap, a GPU the driver lost."""
from __future__ import annotations

from typing import Mapping

from gpudoctor.probes import hostinfo
from gpudoctor.probes.base import Result, confirmed, inconclusive, ruled_out, skipped

# nvidia-smi's per-GPU counters (supported since the R3xx drivers; remapped_rows from R450 on Ampere and later, where
# older GPUs say [N/A]); queried in two calls so that an older driver refusing one field still answers the other
ECC_FIELDS = "index,pci.bus_id,ecc.errors.uncorrected.volatile.total"
REMAP_FIELDS = "index,remapped_rows.pending,remapped_rows.failure"
# what nvidia-smi prints for a GPU that fell off the bus or that the driver can no longer talk to
LOST = ("Unable to determine the device handle", "GPU is lost", "has fallen off the bus", "Unknown Error")


def _rows(options: Mapping, fields: str) -> tuple[list[list[str]], str]:
    out = hostinfo.run_command(options, ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                               timeout=15)
    if out is None:
        return [], ""
    text = (out.stdout or "") + (out.stderr or "")
    if out.returncode != 0:
        return [], text
    return [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()], text


def probe(options: Mapping) -> Result:
    if hostinfo.which(options, "nvidia-smi") is None:
        return skipped("no nvidia-smi on this machine (no NVIDIA driver): nothing to read GPU health from", [], {})
    ecc, ecc_text = _rows(options, ECC_FIELDS)
    remap, remap_text = _rows(options, REMAP_FIELDS)
    evidence: list[str] = []
    problems: list[str] = []
    lost = [line.strip() for line in (ecc_text + "\n" + remap_text).splitlines() if any(w in line for w in LOST)]
    for line in dict.fromkeys(lost):
        problems.append(f"nvidia-smi: {line[:160]}: a GPU the driver cannot reach (drain the node, reset or replace it)")
    counted = 0
    for row in ecc:
        if len(row) < 3:
            continue
        index, bus, errors = row[0], row[1], row[2]
        evidence.append(f"GPU {index} ({bus}): uncorrected ECC errors since boot {errors}")
        if errors.isdigit():
            counted += 1
            if int(errors) > 0:
                problems.append(f"GPU {index} ({bus}) has {errors} uncorrectable ECC error(s) since the driver loaded")
    for row in remap:
        if len(row) < 3:
            continue
        index, pending, failure = row
        if pending.lower() == "yes":
            problems.append(f"GPU {index} has a row remapping pending: reset the GPU before it is used again")
        if failure.lower() == "yes":
            problems.append(f"GPU {index} failed to remap a row: its memory is faulty, replace it")
    figures = {"gpus_read": len(ecc), "ecc_counted": counted}
    if problems:
        return confirmed(problems[0], evidence + [f"MN8: {p}" for p in problems[1:]], figures, ("MN8",))
    if not ecc or not counted:
        return inconclusive("nvidia-smi gave no ECC counters here (consumer GPUs report N/A)",
                            evidence or [ecc_text.strip()[:160] or "no output"], figures, ("MN8",))
    return ruled_out(f"{counted} GPU(s) without uncorrectable ECC errors or pending row remaps", evidence, figures,
                     ("MN8",))
