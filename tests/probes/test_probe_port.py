"""The port probe (D4) against a port this test holds, and against a free one."""
from __future__ import annotations

import json
import os
import socket

import pytest

from gpudoctor.probes import port, registry, runner
from gpudoctor.probes.base import Status


def test_a_held_port_names_this_process_and_a_free_alternative():
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        held = holder.getsockname()[1]
        result = runner.run_probe(registry.get("port"), {"port": held})
    assert result.status is Status.CONFIRMED, result
    assert result.entries == ("D4",)
    assert f"port {held} is in use by pid {os.getpid()}" in result.summary
    holders = result.figures["holders"]
    assert holders[0]["pid"] == os.getpid() and "pytest" in holders[0]["cmdline"]
    free = result.figures["free_port"]
    assert free and free != held
    assert any(f"--master-port={free}" in line for line in result.evidence)


def test_master_port_from_the_environment_is_what_gets_tested():
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        free = sock.getsockname()[1]
    result = port.probe({"env": {"MASTER_PORT": str(free)}})
    assert result.status is Status.RULED_OUT
    assert f"port {free} (MASTER_PORT) is free" in result.summary


@pytest.mark.parametrize("value", ["29500x", "70000", "0", "-1"])
def test_not_a_port_number_is_said_so_without_a_traceback_or_an_entry(value):
    """QA23 B3: 70000 raised OverflowError inside bind(); 'abc' claimed D1, which is about variables never set."""
    result = port.probe({"env": {"MASTER_PORT": value}})
    assert result.status is Status.CONFIRMED and "not a port number" in result.summary and result.entries == ()


def test_cli_json_for_d4(cli):
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        held = holder.getsockname()[1]
        res = cli("probe", "--for", "D4", "--port", str(held), "--json")
    assert res.code == 1, res
    data = json.loads(res.out)
    assert data["results"][0]["probe"] == "port" and data["results"][0]["status"] == "confirmed"
    res = cli("probe", "--for", "D4")
    assert res.code in (0, 1)
    assert all(len(line) <= 80 for line in res.out.splitlines())


def test_only_the_rendezvous_host_is_asked_to_bind_master_port():
    """QA25b B15: on a worker node a local listener on MASTER_PORT "confirmed D4" and advised another port (or
    localhost:0), which would split a multi-node job; only MASTER_ADDR's host binds that port."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        held = holder.getsockname()[1]
        elsewhere = port.probe({"env": {"MASTER_ADDR": "192.0.2.10", "MASTER_PORT": str(held)}})  # TEST-NET-1
        here = port.probe({"env": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(held)}})
        unknown = port.probe({"env": {"MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": str(held)}})
    assert elsewhere.status is Status.SKIPPED and "192.0.2.10 is another host" in elsewhere.summary
    assert here.status is Status.CONFIRMED and here.entries == ("D4",)
    assert unknown.status is Status.CONFIRMED and unknown.entries == ("D2",) and "does not resolve" in unknown.summary
