"""The GPU-health probe (MN8): Skipped here, and nvidia-smi's answers read from stand-ins of a healthy and a faulty node."""
from __future__ import annotations

from sysfake import add_command
from gpudoctor.probes import gpuhealth, registry, runner
from gpudoctor.probes.base import Status


def smi(bin_dir, ecc: str, remap: str = "0, No, No\n1, No, No", code: int = 0):
    """nvidia-smi that answers the two --query-gpu calls the probe makes (ECC counters, then row remapping)."""
    add_command(bin_dir, "nvidia-smi", f"""case "$1" in
  *ecc*) printf '%s\\n' '{ecc}' ;;
  *) printf '%s\\n' '{remap}' ;;
esac
exit {code}
""")
    return {"bin_dir": str(bin_dir)}


def test_skipped_here_with_the_reason():
    result = runner.run_probe(registry.get("gpuhealth"), {})
    if result.status is not Status.SKIPPED:  # a machine with a driver: the probe has real work to do
        assert result.status in (Status.RULED_OUT, Status.CONFIRMED, Status.INCONCLUSIVE)
        return
    assert "NVIDIA driver" in result.summary or "nvidia-smi" in result.summary


def test_healthy_gpus_rule_mn8_out(bin_dir):
    result = gpuhealth.probe(smi(bin_dir, "0, 00000000:18:00.0, 0\n1, 00000000:2A:00.0, 0"))
    assert result.status is Status.RULED_OUT, result
    assert result.entries == ("MN8",) and result.figures["ecc_counted"] == 2


def test_an_uncorrectable_ecc_error_confirms_mn8(bin_dir):
    result = gpuhealth.probe(smi(bin_dir, "0, 00000000:18:00.0, 0\n1, 00000000:2A:00.0, 3"))
    assert result.status is Status.CONFIRMED and result.entries == ("MN8",)
    assert "GPU 1 (00000000:2A:00.0) has 3 uncorrectable ECC error(s)" in result.summary


def test_a_pending_row_remap_and_a_lost_gpu(bin_dir):
    result = gpuhealth.probe(smi(bin_dir, "0, 00000000:18:00.0, 0\n1, 00000000:2A:00.0, 0", "0, Yes, No\n1, No, No"))
    assert result.status is Status.CONFIRMED and "GPU 0 has a row remapping pending" in result.summary
    lost = "Unable to determine the device handle for GPU 0000:03:00.0: Unknown Error"
    result = gpuhealth.probe(smi(bin_dir, lost, lost, code=15))
    assert result.status is Status.CONFIRMED and "cannot reach" in result.summary


def test_consumer_gpus_without_ecc_are_inconclusive(bin_dir):
    result = gpuhealth.probe(smi(bin_dir, "0, 00000000:01:00.0, [N/A]", "0, [N/A], [N/A]"))
    assert result.status is Status.INCONCLUSIVE and "N/A" in result.summary
