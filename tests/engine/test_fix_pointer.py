"""fix_for: the signature or rule that fired picks the entry's fix step and the fix actions `fix --log` plans."""
from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from gpudoctor.engine.diagnose import diagnose
from gpudoctor.engine.sources import resolve

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "logs"
FIXES = ROOT / "tests" / "data" / "fixes"
TMP_CHECKPOINT = LOGS / "D23" / "axolotl-948-tmp-checkpoint-rename-race.log"  # HF Trainer 4.36's staging rename
READY_TWICE = LOGS / "D8" / "alpaca-lora-301-ddp-variable-marked-ready-twice.log"  # reentrant checkpointing
UNUSED = LOGS / "D8" / "aux-head-unused-torchrun.log"
HF_MISMATCH = LOGS / "D18" / "hendrycks-apps-9-ds-config-trainingarguments-mismatch.log"
AUTO_COMPARED = LOGS / "D18" / "deepspeed-1270-own-loop-auto-gradient-clipping-typeerror.log"  # plain DeepSpeed


def top(catalog, *paths):
    [finding, *_] = diagnose(catalog, resolve([str(p) for p in paths])).findings
    return finding


def test_a_framework_bug_leads_with_the_upgrade_not_the_users_rank_gating(catalog):
    f = top(catalog, TMP_CHECKPOINT)
    assert (f.id, f.tier) == ("D23", "match")
    assert f.pointed.step == 4 and f.pointed.steps == len(catalog.get("D23").fix)
    assert "transformers" in f.pointed.text and "transformers>=4.37" in f.pointed.code
    assert f.pointed.actions == ()  # the rank-zero patch of the user's script is not this cause's fix
    assert f.pointed.because == "staging-rename-raced"


@pytest.mark.parametrize("log, step, actions", [
    (READY_TWICE, 4, ("non-reentrant-checkpoint",)),
    (UNUSED, 2, ("debug-unused-parameters", "find-unused-parameters")),  # threads end at find_unused_parameters
    (HF_MISMATCH, 1, ("ds-config-auto",)),
    (AUTO_COMPARED, 2, ()),  # plain DeepSpeed read "auto" as a number: writing more "auto" would be wrong
    # torch 2's launch appends --local-rank the script does not take: torchrun appends nothing
    (LOGS / "D1" / "Chinese-CLIP-74-main-unrecognized-local-rank.log", 1,
     ("launch-with-torchrun", "local-rank-both-spellings")),
    # the script insists on --local_rank and torchrun passes none: it has to read LOCAL_RANK
    (LOGS / "D1" / "Swin-Transformer-342-launch-local-rank-required.log", 3, ("local-rank-both-spellings",)),
])
def test_each_cause_of_an_entry_gets_its_own_step_and_actions(catalog, log, step, actions):
    f = top(catalog, log)
    assert f.tier == "match" and f.pointed is not None, f
    assert (f.pointed.step, f.pointed.actions) == (step, actions)
    assert f.pointed.text == catalog.get(f.id).fix[step - 1].text


def test_the_strongest_evidence_picks_the_step_and_every_fired_kind_adds_its_actions(catalog, tmp_path):
    both = tmp_path / "both.log"
    both.write_text(UNUSED.read_text(errors="replace") + READY_TWICE.read_text(errors="replace"))
    f = top(catalog, both)
    assert f.id == "D8"
    assert f.pointed.step == 2 and f.pointed.because == "reduction-not-finished"  # weight 0.97 against 0.85
    assert f.pointed.actions == ("debug-unused-parameters", "find-unused-parameters", "non-reentrant-checkpoint")


def test_nothing_pointed_where_no_fix_for_evidence_fired(catalog):
    log = LOGS / "D4" / "two-torchrun-same-master-port.log"  # D4 has no fix_for
    f = top(catalog, log)
    assert f.id == "D4" and f.pointed is None


def test_text_report_prints_the_step_and_says_which(cli):
    res = cli("diagnose", str(TMP_CHECKPOINT))
    assert res.code == 0, res
    text = " ".join(res.out.split())
    assert "fix: When the duplicate save is inside a framework" in text
    assert "(fix step 4 of 6, for what this log shows)" in text
    assert max(len(line) for line in res.out.splitlines()) <= 80


def test_json_and_markdown_carry_the_step(cli):
    data = json.loads(cli("diagnose", str(TMP_CHECKPOINT), "--json").out)
    [f] = [f for f in data["findings"] if f["id"] == "D23"]
    assert f["fix_step"]["number"] == 4 and f["fix_step"]["of"] == 6 and f["fix_step"]["because"] == "staging-rename-raced"
    assert f["fix_actions"] == [] and f["fix"]  # the entry's summary stays where /2 readers find it
    other = json.loads(cli("diagnose", str(LOGS / "D4" / "two-torchrun-same-master-port.log"), "--json").out)
    assert other["findings"][0]["fix_step"] is None and other["findings"][0]["fix_actions"] == []
    md = cli("diagnose", str(TMP_CHECKPOINT), "--format", "markdown").out
    assert "**Fix:** When the duplicate save" in md and "pip install -U 'transformers>=4.37'" in md
    assert re.search(r"Step 4 of 6 of `gpudoctor show D23`", md)


def test_fix_from_a_log_plans_only_what_its_evidence_calls_for(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_STATE_DIR", str(tmp_path / "state"))
    config = tmp_path / "ds_config.json"
    shutil.copyfile(FIXES / "D18" / "ds_config.json", config)
    script = tmp_path / "train.py"
    shutil.copyfile(FIXES / "D18" / "own_loop_bare_backward.py", script)
    res = cli("fix", "--log", str(HF_MISMATCH), "--config", str(config), "--json")
    assert res.code == 0, res
    data = json.loads(res.out)
    assert [f["action"] for f in data["fixes"]] == ["ds-config-auto"]
    assert any(n.startswith("engine-backward: not planned, the log's evidence does not call for it") for n in data["notes"])
    assert data["fix_step"]["number"] == 1
    # a script whose loop calls loss.backward() beside the engine witnesses the other cause too: both are planned
    res = cli("fix", "--log", str(HF_MISMATCH), "--config", str(config), "--script", str(script), "--json")
    assert sorted(f["action"] for f in json.loads(res.out)["fixes"]) == ["ds-config-auto", "engine-backward"]
    # without the log every fix of the entry is planned, as before
    res = cli("fix", "D18", "--config", str(config), "--json")
    assert "engine-backward: give --script train.py to get a diff" in json.loads(res.out)["notes"]


def test_a_step_no_action_carries_out_plans_nothing_and_shows_the_step(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_STATE_DIR", str(tmp_path / "state"))
    res = cli("fix", "--log", str(TMP_CHECKPOINT))
    assert res.code == 1, res
    text = " ".join(res.out.split())
    assert "what this log calls for (step 4 of 6)" in text and "transformers>=4.37" in text
    assert "rank-zero-side-effects: not planned" in text
    # a script that saves on every rank witnesses the user's own race as well: its fix joins, the log's step leads
    script = tmp_path / "train.py"
    shutil.copyfile(FIXES / "D23" / "every_rank_logs_and_saves.py", script)
    res = cli("fix", "--log", str(TMP_CHECKPOINT), "--script", str(script))
    assert res.code == 0, res
    text = " ".join(res.out.split())
    assert "what this log calls for (step 4 of 6)" in text and "[safe] rank-zero-side-effects" in text
    assert script.read_bytes() == (FIXES / "D23" / "every_rank_logs_and_saves.py").read_bytes()


def test_only_picks_actions_by_hand_and_refuses_unknown_ones(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_STATE_DIR", str(tmp_path / "state"))
    script = tmp_path / "train.py"
    shutil.copyfile(FIXES / "D8" / "reentrant_checkpoint_ddp.py", script)
    res = cli("fix", "D8", "--script", str(script), "--only", "non-reentrant-checkpoint", "--json")
    data = json.loads(res.out)
    assert [f["action"] for f in data["fixes"]] == ["non-reentrant-checkpoint"]
    assert "find-unused-parameters: not planned, not in --only" in data["notes"]
    res = cli("fix", "D8", "--script", str(script), "--only", "no-such-fix")
    assert res.code == 2 and "D8 has no fix action 'no-such-fix'" in res.err and "Traceback" not in res.err
    assert cli("fix", "D8", "--only", ",").code == 2


def test_diagnose_with_a_script_plans_the_pointed_fix_and_says_how_to_apply_it(cli, tmp_path):
    script = tmp_path / "train.py"
    shutil.copyfile(FIXES / "D8" / "reentrant_checkpoint_ddp.py", script)
    res = cli("diagnose", str(READY_TWICE), "--script", str(script))
    tail = res.out[res.out.index("Fix for D8"):]
    assert "non-reentrant-checkpoint" in tail and "find-unused-parameters: not planned" in " ".join(tail.split())
    # the script's own path, ready to paste (shell-quoted)
    assert f"apply with: gpudoctor fix D8 --script {shlex.quote(str(script))} --only non-reentrant-checkpoint " \
           "--apply" in " ".join(tail.split())


@pytest.mark.parametrize("line, entry, step", [
    # NCCL 2.2x's multi-node NVLink check: the IMEX service, not the fabric manager
    ("node1:2:2 [0] transport/nvls.cc:180 NCCL WARN MNNVL (cliqueSize 8) is available but not working on this "
     "system. Check the IMEX channel configuration (/dev/nvidia-caps-imex-channels).", "MN1", 5),
    ("cudaGetDeviceCount returned 802 -> system not yet initialized", "MN1", 1),
    ("NCCL WARN P2P is disabled between NVLINK connected GPUs 1 and 3. Please check", "D25", 4),
])
def test_one_entry_two_platform_faults(catalog, tmp_path, line, entry, step):
    log = tmp_path / "nccl.log"
    log.write_text(line + "\n")
    f = top(catalog, log)
    assert (f.id, f.tier, f.pointed.step) == (entry, "match", step), f
