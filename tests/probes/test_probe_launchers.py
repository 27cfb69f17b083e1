"""The launcher-config probe (D5, D6, D16-D18) on configs written by the test."""
from __future__ import annotations

import json

from gpudoctor.probes import launchers
from gpudoctor.probes.base import Status


def run(tmp_path, gpus=4, **paths):
    options = {"search_defaults": False, "gpu_count": gpus, "env": {"HOME": str(tmp_path)}}
    options.update({k: str(v) for k, v in paths.items()})
    return launchers.probe(options)


def test_nothing_to_read_is_skipped(tmp_path):
    result = run(tmp_path)
    assert result.status is Status.SKIPPED


def test_accelerate_config_that_runs_one_process_on_four_gpus(tmp_path):
    config = tmp_path / "acc.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nnum_processes: 1\n")
    result = run(tmp_path, accelerate_config=config)
    assert result.status is Status.CONFIRMED and result.entries == ("D5",)
    assert "the others sit idle" in result.summary


def test_accelerate_with_more_processes_than_gpus_and_ignored_deepspeed_keys(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}, "gradient_accumulation_steps": "auto"}))
    config = tmp_path / "acc.yaml"
    config.write_text(f"distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n"
                      f"  deepspeed_config_file: {ds}\n  zero_stage: 3\n")
    result = run(tmp_path, accelerate_config=config)
    assert result.status is Status.CONFIRMED
    assert set(result.entries) == {"D27", "D17"}
    assert any("8 per machine, but only 4 GPU(s)" in line for line in result.evidence)
    assert any("accelerate ignores zero_stage" in line for line in result.evidence)
    assert result.figures["ds_config"] == str(ds)


def test_ds_config_problems(tmp_path):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({
        "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}, "overlap_comms": True},
        "fp16": {"enabled": True}, "bf16": {"enabled": True},
        "gradient_accumulation_steps": 4, "train_micro_batch_size_per_gpu": 2, "train_batch_size": 64,
        "gradient_acumulation_steps": 1,
    }))
    result = launchers.probe({"search_defaults": False, "gpu_count": 4, "ds_config": str(ds), "grad_accum": 8,
                              "world_size": 4, "env": {}})
    assert result.status is Status.CONFIRMED
    assert set(result.entries) == {"D16", "D17", "D18"}
    text = "\n".join(result.evidence)
    assert "offload_param needs ZeRO stage 3" in text
    assert "zero_optimization.overlap_comms is not a ZeRO key" in text and "overlap_comm?" in text
    assert "fp16 and bf16 are both enabled" in text
    assert "gradient_accumulation_steps is 4 in the JSON and 8 elsewhere" in text
    assert "train_batch_size 64 != micro 2 x accumulation 4 x world 4" in text
    assert "did you mean gradient_accumulation_steps?" in text


def test_a_clean_ds_config_is_ruled_out(tmp_path):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
                              "bf16": {"enabled": "auto"}, "gradient_accumulation_steps": "auto",
                              "train_micro_batch_size_per_gpu": "auto"}))
    result = run(tmp_path, ds_config=ds)
    assert result.status is Status.RULED_OUT, result
    assert result.entries == ("D16", "D17", "D18")


def test_hostfile_problems(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# two nodes\nlocalhost slots=8\nworker-1.invalid slots=8\nworker-1.invalid slots=8\n"
                        "worker-2 gpus=8\n")
    result = run(tmp_path, hostfile=hostfile)
    assert result.status is Status.CONFIRMED and set(result.entries) == {"D6", "D27"}
    text = "\n".join(result.evidence)
    assert "line 5 'worker-2 gpus=8' is not 'HOST slots=N'" in text
    assert "worker-1.invalid is listed twice" in text
    assert "worker-1.invalid do(es) not resolve" in text
    assert "localhost has slots=8 but 4 GPU(s)" in text


def test_a_good_hostfile(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=4\n")
    result = run(tmp_path, hostfile=hostfile)
    assert result.status is Status.RULED_OUT and set(result.entries) == {"D6", "D27"}
