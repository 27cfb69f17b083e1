"""MN3 under the HF Trainer: ddp_timeout on its arguments, sized from the slow step the log shows."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.engine.fixes.errors import NotApplicable
from gpudoctor.engine.fixes.facts import facts_from_text
from gpudoctor.engine.fixes.patches.ddp import trainer_ddp_timeout

LOG = (Path(__file__).resolve().parents[1] / "data" / "logs" / "MN3" /
       "llamafactory-360-qwen-sft-tokenizer-29min-main-process-first-barrier-socket-timeout.log")
SCRIPT = Path(__file__).resolve().parents[1] / "data" / "fixes" / "MN3" / "trainer_without_ddp_timeout.py"


def _changed(before: str, after: str) -> list[str]:
    return [b for a, b in zip(before.splitlines(), after.splitlines()) if a != b]


@pytest.mark.parametrize("call, expected", [
    ("args = TrainingArguments(output_dir='o')", "args = TrainingArguments(output_dir='o', ddp_timeout=7200)"),
    ("cfg = trl.SFTConfig(output_dir='o', ddp_timeout=1800)", "cfg = trl.SFTConfig(output_dir='o', ddp_timeout=7200)"),
    ("a = Seq2SeqTrainingArguments(output_dir='o')", "a = Seq2SeqTrainingArguments(output_dir='o', ddp_timeout=7200)"),
])
def test_the_trainers_arguments_get_a_longer_ddp_timeout(call, expected):
    new, notes = trainer_ddp_timeout(call + "\n", "train.py", {})
    assert new == expected + "\n" and "120 minutes" in notes[0]


@pytest.mark.parametrize("call", [
    "args = TrainingArguments(output_dir='o', ddp_timeout=10800)",  # already longer
    "args = TrainingArguments(output_dir='o', ddp_timeout=hours * 3600)",  # the script computes it
    "args = parser.parse_args_into_dataclasses()[0]",  # from the command line: --ddp_timeout is the fix there
    "cfg = LoraConfig(r=8)",  # not a Trainer's arguments
])
def test_a_longer_or_computed_timeout_and_other_calls_are_left_alone(call):
    with pytest.raises(NotApplicable):
        trainer_ddp_timeout(call + "\n", "train.py", {})


def test_the_timeout_is_sized_from_the_slow_step_in_the_log(cli_proc, tmp_path):
    assert facts_from_text([], ["a progress bar still running after 32:13 (32068/85249 [32:13<53:59), as long as the "
                                "30:00 timeout"])["timeout_minutes"] == 150  # 86 minutes, half as long again
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.read_text())
    r = cli_proc("fix", "--log", str(LOG), "--script", str(script))
    assert r.code == 0, r.err
    assert "+    ddp_timeout=3600," in r.out  # 29:55 + 3:25 of tokenising: an hour
    assert script.read_text() == SCRIPT.read_text()  # a dry run writes nothing
