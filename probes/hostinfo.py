"""Facts about this host that several probes read: environment, /sys and /proc under a root, commands, GPUs, the job."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from gpudoctor.engine.display import strip_ansi

COMMAND_TIMEOUT_S = 5.0


def environ(options: Mapping) -> Mapping[str, str]:
    """The environment the job would run with: an injected mapping, else this process's."""
    env = options.get("env")
    return os.environ if env is None else env


def sys_root(options: Mapping) -> Path:
    """Where /sys, /proc and /dev are read from; tests point it at a fabricated tree."""
    return Path(options.get("sys_root") or "/")


def under_root(options: Mapping, path: str) -> Path:
    return sys_root(options) / path.lstrip("/")


def read_text(path: Path, default: str | None = None) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except (OSError, ValueError):  # sysfs answers EINVAL for the speed of a down link
        return default


def which(options: Mapping, name: str) -> str | None:
    """A command's path; options['bin_dir'] is searched first so tests can stand in for nvidia-smi."""
    search = os.environ.get("PATH", os.defpath)
    if options.get("bin_dir"):
        search = f"{options['bin_dir']}{os.pathsep}{search}"
    return shutil.which(name, path=search)


@dataclass(frozen=True)
class CommandOutput:
    returncode: int | None  # None: it ran past its timeout and was killed
    stdout: str
    stderr: str


def mounts(options: Mapping) -> list[tuple[str, str, tuple[str, ...]]]:
    """(mount point, filesystem type, mount options) of every line of /proc/mounts, which escapes a space as \\040."""
    found = []
    for line in (read_text(under_root(options, "/proc/mounts")) or "").splitlines():
        parts = line.split()
        if len(parts) >= 4:
            found.append((parts[1].replace("\\040", " "), parts[2], tuple(parts[3].split(","))))
    return found


def run_command(options: Mapping, argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> CommandOutput | None:
    """Run a command with a timeout; None when it is not installed. Never raises for a failing command."""
    path = which(options, argv[0])
    if path is None:
        return None
    try:
        done = subprocess.run([path, *argv[1:]], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired as exc:
        return CommandOutput(None, strip_ansi(_text(exc.stdout)), strip_ansi(_text(exc.stderr)))
    except OSError as exc:
        return CommandOutput(126, "", str(exc))
    # terminal sequences a command prints even into a pipe (nvidia-smi 5xx underlines its `topo` matrices' header with
    # ESC[4m ... ESC[0m) go: parsers see the words, and none reaches the user's terminal through evidence
    return CommandOutput(done.returncode, strip_ansi(done.stdout), strip_ansi(done.stderr))


def _text(data) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def driver_version(options: Mapping) -> str | None:
    """The NVIDIA kernel module's version from /proc, else from nvidia-smi; None without a driver."""
    text = read_text(under_root(options, "/proc/driver/nvidia/version"))
    if text:
        m = re.search(r"Kernel Module(?: for [^ ]+)?\s+([0-9]+(?:\.[0-9]+)+)", text)
        if m:
            return m.group(1)
    out = run_command(options, ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if out and out.returncode == 0 and out.stdout.strip():
        return out.stdout.strip().splitlines()[0].strip()
    return None


def has_nvidia_driver(options: Mapping) -> bool:
    return under_root(options, "/proc/driver/nvidia/version").exists() or which(options, "nvidia-smi") is not None


def physical_gpu_count(options: Mapping) -> int:
    """GPUs the driver sees, without importing torch (options['gpu_count'] overrides it)."""
    if options.get("gpu_count") is not None:
        return int(options["gpu_count"])
    gpus_dir = under_root(options, "/proc/driver/nvidia/gpus")
    try:
        count = sum(1 for _ in gpus_dir.iterdir())
    except OSError:
        count = 0
    if count:
        return count
    out = run_command(options, ["nvidia-smi", "-L"])
    if out and out.returncode == 0:
        return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return 0


def parse_visible_devices(value: str | None) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: None when unset; parsing stops at the first invalid entry."""
    if value is None:
        return None
    devices = []
    for token in (t.strip() for t in value.split(",")):
        if re.fullmatch(r"[0-9]+", token) or re.match(r"(GPU|MIG)-", token):
            devices.append(token)
        else:  # "-1", "" or a typo: CUDA ignores it and everything after it
            break
    return devices


def visible_gpu_count(options: Mapping) -> int:
    count = physical_gpu_count(options)
    visible = parse_visible_devices(environ(options).get("CUDA_VISIBLE_DEVICES"))
    if visible is None:
        return count
    usable = [d for d in visible if not d.isdigit() or int(d) < count]
    return min(len(usable), count)


def hostname() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class Job:
    """The rank contract a launcher gave this process (D1)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    torchrun: bool  # TorchElastic set it up
    agent_store: bool  # the torchrun agent hosts the store at MASTER_ADDR:MASTER_PORT
    restart: int

    @property
    def multi_node(self) -> bool:
        return self.world_size > self.local_world_size


def job_from_env(env: Mapping[str, str]) -> Job | None:
    """The launch contract when every variable is there and parses; None otherwise (env probe says why)."""
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    except (KeyError, ValueError):
        return None
    try:
        local_rank = int(env.get("LOCAL_RANK", rank))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
        restart = int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return None
    agent = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    return Job(rank, world, local_rank, local_world, addr, port, "TORCHELASTIC_RUN_ID" in env, agent, restart)


def torch_installed() -> bool:
    """Whether torch can be imported, without importing it (that costs seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False
