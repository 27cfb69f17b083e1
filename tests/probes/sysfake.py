"""Fabricated /sys, /proc and /dev trees and stand-in commands for the probes' tests."""
from __future__ import annotations

import stat
from pathlib import Path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def add_interface(root: Path, name: str, *, index: int, state="up", mtu=1500, speed: int | None = 10000,
                  kind=1, physical=True, bridge=False) -> None:
    """One /sys/class/net/NAME directory as the kernel lays it out (device/ only for real hardware)."""
    base = root / "sys/class/net" / name
    write(base / "ifindex", f"{index}\n")
    write(base / "operstate", f"{state}\n")
    write(base / "mtu", f"{mtu}\n")
    write(base / "type", f"{kind}\n")
    if speed is not None:
        write(base / "speed", f"{speed}\n")
    if physical:
        (base / "device").mkdir(parents=True, exist_ok=True)
    if bridge:
        (base / "bridge").mkdir(parents=True, exist_ok=True)


def add_ib_port(root: Path, device: str, port: int = 1, state="4: ACTIVE", rate="200 Gb/sec (4X HDR)",
                link_layer="InfiniBand") -> None:
    base = root / "sys/class/infiniband" / device / "ports" / str(port)
    write(base / "state", state + "\n")
    write(base / "rate", rate + "\n")
    write(base / "link_layer", link_layer + "\n")


def add_command(bin_dir: Path, name: str, script: str) -> Path:
    """A stand-in for a system command (nvidia-smi, ping, systemctl): a small shell script."""
    path = write(bin_dir / name, "#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    return path
