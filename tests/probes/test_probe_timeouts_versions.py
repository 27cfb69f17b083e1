"""The timeouts probe (MN3, D19, D20) and the versions probe on injected environments and this machine."""
from __future__ import annotations

from gpudoctor.probes import registry, runner, timeouts, versions
from gpudoctor.probes.base import Status


def test_async_error_handling_off_is_confirmed():
    result = timeouts.probe({"env": {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, "backend": "nccl",
                             "torch_version": "2.4.0"})
    assert result.status is Status.CONFIRMED and "MN3" in result.entries and "D20" in result.entries
    assert "async error handling is off" in result.summary


def test_nccl_defaults_on_recent_torch():
    result = timeouts.probe({"env": {}, "backend": "nccl", "torch_version": "2.4.0"})
    assert result.status is Status.RULED_OUT
    assert result.figures["timeout_s"] == 600 and result.figures["async_error_handling"] == 3
    assert any("TORCH_NCCL_DUMP_ON_TIMEOUT=1" in line for line in result.evidence)


def test_a_long_explicit_timeout_masks_a_dead_rank():
    result = timeouts.probe({"env": {}, "backend": "gloo", "pg_timeout_s": 3600, "torch_version": "2.4.0"})
    assert result.status is Status.CONFIRMED and "60 min" in result.summary


def test_gloo_default_is_a_warning():
    result = timeouts.probe({"env": {}, "backend": "gloo", "torch_version": "2.4.0"})
    assert result.status is Status.INCONCLUSIVE and result.figures["timeout_s"] == 1800


def test_version_helpers():
    assert versions.version_tuple("2.13.0+cpu") == (2, 13, 0)
    assert versions.version_tuple("12.4") == (12, 4)
    assert versions.installed_version("no-such-distribution-here") is None


def test_named_combinations():
    facts = {"torch": "2.4.0", "cuda_runtime": None, "hip": None, "distributed": True, "gloo": True}
    problems = versions.combination_problems(facts, gpus=8, driver="550.54.15", driver_cuda="12.4", env={})
    assert any("CPU build but 8 NVIDIA GPU(s)" in p for p in problems)
    facts = {"torch": "2.6.0", "cuda_runtime": "12.6", "distributed": True, "nccl_backend": True,
             "cuda_available": True}
    problems = versions.combination_problems(facts, gpus=8, driver="470.82.01", driver_cuda="11.4", env={})
    assert any("needs a newer driver" in p for p in problems)
    facts = {"torch": "2.13.0+cpu", "cuda_runtime": None, "distributed": True}
    problems = versions.combination_problems(facts, 0, None, None, {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    assert any("segfaults" in p for p in problems)


def test_versions_here():
    result = runner.run_probe(registry.get("versions"), {})
    assert result.status in (Status.RULED_OUT, Status.CONFIRMED), result
    assert result.figures["torch"].startswith("2.") and result.figures["python"]
