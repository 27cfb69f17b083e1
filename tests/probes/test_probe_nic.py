"""The NIC probe (MN2) on fabricated /sys trees, NCCL's selection rules, and this machine."""
from __future__ import annotations

import pytest

from sysfake import add_ib_port, add_interface
from gpudoctor.probes import nic, registry, runner
from gpudoctor.probes.base import Status


def typical_host(root):
    add_interface(root, "lo", index=1, state="unknown", mtu=65536, speed=None, kind=772, physical=False)
    add_interface(root, "eno1", index=2, speed=1000)
    add_interface(root, "ens5", index=3, speed=100000, mtu=9000)
    add_interface(root, "docker0", index=4, speed=None, physical=False, bridge=True)
    return {"lo": ["127.0.0.1", "::1"], "eno1": ["10.0.0.5"], "ens5": ["192.168.1.5"], "docker0": ["172.17.0.1"]}


@pytest.mark.parametrize("spec, name, expected", [
    ("eth", "eth0", True), ("eth", "ens5", False), ("^docker,lo", "docker0", False), ("^docker,lo", "ens5", True),
    ("=eth0", "eth0", True), ("=eth0", "eth01", False), ("^=lo", "lo0", True), ("^=lo", "lo", False),
    ("mlx5_0:1", "mlx5_0", True),
])
def test_match_list_follows_nccl(spec, name, expected):
    assert nic.match_list(spec, name) is expected


def test_ib_port_suffix():
    assert nic.match_list("mlx5_0:1", "mlx5_0", 1) and not nic.match_list("mlx5_0:2", "mlx5_0", 1)


def test_automatic_choice_skips_docker_and_lo_but_takes_the_first_in_order(sysroot):
    addresses = typical_host(sysroot)
    interfaces = nic.read_interfaces({"sys_root": str(sysroot), "addresses": addresses})
    chosen, rule = nic.nccl_socket_selection(interfaces, {})
    assert [i.name for i in chosen] == ["eno1", "ens5"] and "^docker,lo,virbr" in rule
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "multinode": True})
    # NCCL bootstraps over the 1 GbE port while a 100 GbE one sits beside it
    assert result.status is Status.CONFIRMED and result.entries == ("MN2",)
    assert "eno1 runs at 1000 Mb/s" in result.summary


def test_pinning_the_fast_nic_rules_it_out(sysroot):
    addresses = typical_host(sysroot)
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "env": {"NCCL_SOCKET_IFNAME": "ens"}})
    assert result.status is Status.RULED_OUT and result.summary == "NCCL would bootstrap over ens5"


def test_exclusion_that_leaves_only_a_bridge(sysroot):
    add_interface(sysroot, "lo", index=1, kind=772, physical=False, speed=None)
    add_interface(sysroot, "docker0", index=2, physical=False, bridge=True, speed=None)
    addresses = {"lo": ["127.0.0.1"], "docker0": ["172.17.0.1"]}
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "multinode": True})
    assert result.status is Status.CONFIRMED
    assert "only interface NCCL finds is docker0" in result.summary
    # the same host judged as a single node: a warning, since only other nodes would fail to connect
    single = nic.probe({"sys_root": str(sysroot), "addresses": addresses})
    assert single.status is Status.INCONCLUSIVE


def test_ifname_matching_nothing_fails_init(sysroot):
    addresses = typical_host(sysroot)
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "env": {"NCCL_SOCKET_IFNAME": "=eth0"}})
    assert result.status is Status.CONFIRMED and "matches no interface" in result.summary


def test_loopback_named_on_purpose_is_fine_on_one_node_and_wrong_across_nodes(sysroot):
    """QA25b B13: NCCL_SOCKET_IFNAME=lo, a valid single-node setting, was a confirmed MN2 (exit 1) under torchrun on
    one host."""
    addresses = typical_host(sysroot)
    one_node = {"NCCL_SOCKET_IFNAME": "lo", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "env": one_node})
    assert result.status is Status.INCONCLUSIVE and "fine on one node" in result.summary
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "env": one_node, "multinode": True})
    assert result.status is Status.CONFIRMED and "loopback" in result.summary


def test_ib_hca_that_matches_no_active_port(sysroot):
    addresses = typical_host(sysroot)
    add_ib_port(sysroot, "mlx5_0")
    add_ib_port(sysroot, "mlx5_1", state="1: DOWN")
    env = {"NCCL_SOCKET_IFNAME": "ens", "NCCL_IB_HCA": "mlx5_1"}
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "env": env, "multinode": True})
    assert result.status is Status.CONFIRMED and "NCCL_IB_HCA=mlx5_1 matches none" in result.summary
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "env": env})
    assert result.status is Status.INCONCLUSIVE and "fine on one node" in result.summary  # IB is between nodes
    env = {"NCCL_SOCKET_IFNAME": "ens", "NCCL_IB_DISABLE": "1"}
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "env": env, "multinode": True})
    assert result.status is Status.CONFIRMED and "NCCL_IB_DISABLE=1" in result.summary
    env = {"NCCL_SOCKET_IFNAME": "ens", "NCCL_IB_HCA": "mlx5_0"}
    result = nic.probe({"sys_root": str(sysroot), "addresses": addresses, "env": env})
    assert result.status is Status.RULED_OUT and "IB mlx5_0:1" in result.summary
    assert result.figures["ib_selected"] == ["mlx5_0:1"]


def test_this_machine_through_the_runner():
    result = runner.run_probe(registry.get("nic"), {})
    assert result.status in (Status.RULED_OUT, Status.INCONCLUSIVE, Status.CONFIRMED), result
    assert result.figures["interfaces"], result
