"""Launcher configs (D5, D6, D16-D18): the accelerate config, a DeepSpeed hostfile and a ds_config.json."""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Mapping

from gpudoctor.probes import dsconfig, hostinfo
from gpudoctor.probes.base import Result, confirmed, entry_ids, ruled_out, skipped

HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)\s*$")  # DeepSpeed's own hostfile rule
RESOLVE_TIMEOUT_S = 3.0
GPU_TYPES = {"MULTI_GPU", "DEEPSPEED", "FSDP", "MEGATRON_LM"}
# Accelerate ignores these (and asks to remove them) once deepspeed_config_file is given.
IGNORED_WITH_DS_FILE = ("gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
                        "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path",
                        "zero3_save_16bit_model")


def default_accelerate_config(env: Mapping[str, str]) -> Path:
    """Where `accelerate config` writes: $HF_HOME/accelerate, HF_HOME defaulting to $XDG_CACHE_HOME/huggingface."""
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    hf_home = env.get("HF_HOME") or os.path.join(cache, "huggingface")
    return Path(hf_home) / "accelerate" / "default_config.yaml"


def _first_existing(*paths) -> Path | None:
    for path in paths:
        if path and Path(path).is_file():
            return Path(path)
    return None


def probe(options: Mapping) -> Result:
    env = hostinfo.environ(options)
    defaults = options.get("search_defaults", True)
    acc_path = _first_existing(options.get("accelerate_config"),
                               default_accelerate_config(env) if defaults else None)
    host_path = _first_existing(options.get("hostfile"), *(("hostfile", "/job/hostfile") if defaults else ()))
    gpus = hostinfo.visible_gpu_count(options)
    problems: list[tuple[str, str]] = []
    evidence: list[str] = []
    checked: set[str] = set()
    acc = None
    if acc_path:
        acc, acc_problems, acc_notes = check_accelerate(acc_path, gpus)
        problems += acc_problems
        evidence += [f"accelerate {acc_path}: {n}" for n in acc_notes]
        checked |= {"D5"} | ({"D27"} if gpus else set())
    ds_file = (acc or {}).get("deepspeed_config", {}) or {}
    named_in_acc = ds_file.get("deepspeed_config_file") if isinstance(ds_file, dict) else None
    ds_path = _first_existing(options.get("ds_config"), named_in_acc, *(("ds_config.json",) if defaults else ()))
    if ds_path:
        world = _world_size(acc, env, options)
        accum = options.get("grad_accum")
        if accum is None and isinstance(ds_file, dict) and ds_file.get("gradient_accumulation_steps") is not None:
            accum = ds_file["gradient_accumulation_steps"]
        try:
            config = json.loads(ds_path.read_text())
            if not isinstance(config, dict):
                raise ValueError("the top level is not an object")
        except (OSError, ValueError) as exc:
            problems.append(("D17", f"{ds_path} is not valid JSON: {exc}"))
        else:
            ds_problems, ds_notes = dsconfig.check(config, world, accum)
            problems += ds_problems
            evidence += [f"ds_config {ds_path}: {n}" for n in ds_notes]
        checked |= {"D16", "D17", "D18"}
    if host_path:
        host_problems, host_notes = check_hostfile(host_path, gpus)
        problems += host_problems
        evidence += [f"hostfile {host_path}: {n}" for n in host_notes]
        checked |= {"D6"} | ({"D27"} if gpus else set())
    figures = {"accelerate_config": acc_path and str(acc_path), "hostfile": host_path and str(host_path),
               "ds_config": ds_path and str(ds_path), "gpus_visible": gpus}
    if not (acc_path or host_path or ds_path):
        where = [str(default_accelerate_config(env)), "./hostfile", "/job/hostfile", "./ds_config.json"]
        return skipped("no accelerate config, hostfile or ds_config.json found",
                       ["looked in " + ", ".join(where if defaults else ["(paths given only)"])], figures)
    if problems:
        entries = entry_ids(e for e, _ in problems)
        return confirmed(problems[0][1], evidence + [f"{e}: {t}" for e, t in problems], figures, entries)
    found = ", ".join(n for n, p in (("accelerate config", acc_path), ("hostfile", host_path),
                                     ("ds_config", ds_path)) if p)
    return ruled_out(f"{found}: nothing known to break", evidence, figures, entry_ids(checked))


def _world_size(acc: dict | None, env: Mapping[str, str], options: Mapping) -> int | None:
    for value in (options.get("world_size"), (acc or {}).get("num_processes"), env.get("WORLD_SIZE")):
        try:
            if value is not None and int(value) > 0:
                return int(value)
        except (TypeError, ValueError):
            continue
    return None


def check_accelerate(path: Path, gpus: int) -> tuple[dict | None, list[tuple[str, str]], list[str]]:
    import yaml

    try:
        config = yaml.safe_load(path.read_text()) or {}
        if not isinstance(config, dict):
            raise ValueError("the top level is not a mapping")
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return None, [("D5", f"{path} cannot be read: {exc}".splitlines()[0])], []
    problems: list[tuple[str, str]] = []
    kind = str(config.get("distributed_type", "NO")).upper()
    processes = int(config.get("num_processes", 1) or 1)
    machines = int(config.get("num_machines", 1) or 1)
    per_machine = max(1, processes // machines)
    use_cpu = bool(config.get("use_cpu")) or kind == "MULTI_CPU"
    notes = [f"distributed_type {kind}, num_processes {processes}, num_machines {machines}; {gpus} GPU(s) visible"]
    if not use_cpu and gpus > 1 and (kind == "NO" or processes == 1):
        problems.append(("D5", f"accelerate config launches 1 process (distributed_type {kind}, num_processes "
                               f"{processes}) on a machine with {gpus} GPUs: the others sit idle"))
    if not use_cpu and gpus and kind in GPU_TYPES and per_machine > gpus:
        problems.append(("D27", f"num_processes {processes} over {machines} machine(s) is {per_machine} per machine, "
                               f"but only {gpus} GPU(s) are visible here"))
    gpu_ids = config.get("gpu_ids")
    if gpu_ids not in (None, "all") and kind in GPU_TYPES:
        ids = [g for g in str(gpu_ids).split(",") if g.strip()]
        if len(ids) != per_machine:
            problems.append(("D5", f"gpu_ids lists {len(ids)} GPU(s) but {per_machine} processes run per machine"))
    if machines > 1 and not config.get("main_process_ip"):
        problems.append(("D5", f"num_machines {machines} without main_process_ip: the machines cannot meet"))
    ds = config.get("deepspeed_config") or {}
    if kind == "DEEPSPEED" and not ds:
        problems.append(("D5", "distributed_type DEEPSPEED without a deepspeed_config section"))
    if isinstance(ds, dict) and ds.get("deepspeed_config_file"):
        both = [k for k in IGNORED_WITH_DS_FILE if k in ds]
        if both:
            problems.append(("D17", f"deepspeed_config_file is set, so accelerate ignores {', '.join(both)} "
                                    "from this config: set them in the JSON instead"))
        notes.append(f"deepspeed_config_file {ds['deepspeed_config_file']}")
    return config, problems, notes


def check_hostfile(path: Path, gpus: int) -> tuple[list[tuple[str, str]], list[str]]:
    problems: list[tuple[str, str]] = []
    hosts: dict[str, int] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        return [("D6", f"{path} cannot be read: {exc}")], []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = HOSTFILE_LINE.match(line)
        if not m:
            problems.append(("D6", f"line {number} {line!r} is not 'HOST slots=N': the deepspeed launcher stops "
                                   "with 'Hostfile contains a bad entry'"))
            continue
        host, slots = m.group(1), int(m.group(2))
        if host in hosts:
            problems.append(("D6", f"{host} is listed twice: the deepspeed launcher refuses duplicate hosts"))
        if slots == 0:
            problems.append(("D6", f"{host} has slots=0"))
        hosts[host] = slots
    if not hosts and not problems:
        problems.append(("D6", "the hostfile lists no hosts"))
    unresolved = [h for h, ok in resolve_all(list(hosts)).items() if not ok]
    if unresolved:
        problems.append(("D6", f"{', '.join(unresolved)} do(es) not resolve from here: the launcher's ssh fails"))
    local = {"localhost", "127.0.0.1", hostinfo.hostname(), hostinfo.hostname().split(".")[0]}
    for host, slots in hosts.items():
        if host in local and gpus and slots > gpus:
            problems.append(("D27", f"{host} has slots={slots} but {gpus} GPU(s) are visible on it"))
    listed = ", ".join(f"{h}={s}" for h, s in hosts.items())
    notes = [f"{len(hosts)} host(s), {sum(hosts.values())} slot(s): {listed}"]
    return problems, notes


def resolve_all(hosts: list[str], timeout_s: float = RESOLVE_TIMEOUT_S) -> dict[str, bool]:
    """Resolve in threads: getaddrinfo has no timeout of its own and a dead DNS server blocks for long."""
    results = {h: False for h in hosts}

    def resolve(host):
        try:
            socket.getaddrinfo(host, None)
            results[host] = True
        except (OSError, UnicodeError):
            results[host] = False

    threads = [threading.Thread(target=resolve, args=(h,), daemon=True) for h in hosts]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return results
