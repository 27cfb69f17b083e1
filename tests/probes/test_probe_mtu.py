"""The MTU probe (MN4): local MTUs, and jumbo frames against a peer through a stand-in ping."""
from __future__ import annotations

from sysfake import add_command, add_interface
from gpudoctor.probes import mtu, registry, runner
from gpudoctor.probes.base import Status

# A path that carries 1500-byte frames but drops 9000-byte ones: ping -M do fails only for the big payload.
DROPS_JUMBO = """for a in "$@"; do [ "$prev" = "-s" ] && size=$a; prev=$a; done
if [ "$size" -gt 1472 ]; then echo "2 packets transmitted, 0 received, 100% packet loss"; exit 1; fi
echo "2 packets transmitted, 2 received, 0% packet loss"; exit 0
"""
CARRIES_ALL = 'echo "2 packets transmitted, 2 received, 0% packet loss"\n'


def jumbo_host(root):
    add_interface(root, "lo", index=1, kind=772, physical=False, speed=None, mtu=65536)
    add_interface(root, "eth0", index=2, mtu=9000, speed=25000)
    return {"lo": ["127.0.0.1"], "eth0": ["127.0.0.1"]}


def test_dropped_jumbo_frames_are_confirmed(sysroot, bin_dir):
    addresses = jumbo_host(sysroot)
    add_command(bin_dir, "ping", DROPS_JUMBO)
    options = {"sys_root": str(sysroot), "addresses": addresses, "bin_dir": str(bin_dir), "peer": "127.0.0.1",
               "iface": "eth0"}
    result = mtu.probe(options)
    assert result.status is Status.CONFIRMED and result.entries == ("MN4",)
    assert "9000-byte frames to 127.0.0.1 are dropped while 1500-byte ones pass" in result.summary
    assert any("-s 8972" in line and "failed" in line for line in result.evidence)
    assert any("-s 1472" in line and "ok" in line for line in result.evidence)


def test_a_path_that_carries_jumbo_frames(sysroot, bin_dir):
    addresses = jumbo_host(sysroot)
    add_command(bin_dir, "ping", CARRIES_ALL)
    options = {"sys_root": str(sysroot), "addresses": addresses, "bin_dir": str(bin_dir), "peer": "localhost",
               "iface": "eth0"}
    result = mtu.probe(options)
    assert result.status is Status.RULED_OUT and result.figures["jumbo_ok"] is True


def test_a_peer_that_answers_nothing_is_inconclusive(sysroot, bin_dir):
    addresses = jumbo_host(sysroot)
    add_command(bin_dir, "ping", 'echo "100% packet loss"; exit 1\n')
    result = mtu.probe({"sys_root": str(sysroot), "addresses": addresses, "bin_dir": str(bin_dir),
                        "peer": "127.0.0.1", "iface": "eth0"})
    assert result.status is Status.INCONCLUSIVE


def test_a_jumbo_nic_beside_a_1500_bridge_warns_without_a_peer(sysroot):
    jumbo_host(sysroot)
    add_interface(sysroot, "docker0", index=3, physical=False, bridge=True, mtu=1500, speed=None)
    result = mtu.probe({"sys_root": str(sysroot), "addresses": {"eth0": ["10.0.0.2"], "docker0": ["172.17.0.1"]}})
    assert result.status is Status.INCONCLUSIVE
    assert "eth0 has MTU 9000 but docker0" in result.summary


def test_this_machine_without_a_peer_is_skipped_with_its_mtus():
    result = runner.run_probe(registry.get("mtu"), {})
    assert result.status is Status.SKIPPED and "no --peer HOST" in result.summary
    assert result.figures["mtu"]


def test_this_machine_with_a_peer_and_no_ping(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no ping anywhere: the probe says so instead of failing
    result = mtu.probe({"peer": "127.0.0.1"})
    assert result.status is Status.SKIPPED and "ping is not installed" in result.summary
