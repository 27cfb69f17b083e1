"""D16's config fix: the ZeRO stage raised to a target (3 unless given) and CPU offload on request, in place."""
from __future__ import annotations

import json

import pytest

from gpudoctor.engine.fixes.ds_zero import ds_zero_stage
from gpudoctor.engine.fixes.errors import NotApplicable

NESTED = '{\n  "bf16": {"enabled": true},\n  "zero_optimization": {\n    "stage": STAGE,\n    "overlap_comm": true\n  }\n}\n'


@pytest.mark.parametrize("before, facts, after", [(0, {}, 3), (1, {"zero_stage": 2}, 2), (2, {}, 3)])
def test_the_stage_is_raised_to_the_target_and_only_that_value_changes(before, facts, after):
    out, notes = ds_zero_stage(NESTED.replace("STAGE", str(before)), "ds.json", facts)
    assert out == NESTED.replace("STAGE", str(after)) and f"{before} -> {after}" in notes[0]


def test_cpu_offload_on_request_goes_inside_the_section_in_its_indentation():
    out, notes = ds_zero_stage(NESTED.replace("STAGE", "3"), "ds.json", {"offload": "cpu"})
    lines = out.splitlines()
    assert lines[5:7] == ['    "offload_optimizer": {"device": "cpu", "pin_memory": true},',
                          '    "offload_param": {"device": "cpu", "pin_memory": true}']
    assert lines[7] == "  }" and json.loads(out)["zero_optimization"]["stage"] == 3 and "host RAM" in notes[0]


@pytest.mark.parametrize("text, facts, stage, offloaded", [
    ('{"train_batch_size": 8}', {}, 3, False),  # no ZeRO section: one is added
    ('{"train_batch_size": 8}', {"offload": "cpu"}, 3, True),
    ('{"zero_optimization": {"overlap_comm": true}}', {"zero_stage": 2}, 2, False),  # no stage key: stage 0
    ('{"zero_optimization": {"stage": 1}}', {"offload": "cpu"}, 3, True),  # one line, raised and offloaded
])
def test_missing_sections_and_keys_are_added(text, facts, stage, offloaded):
    zero = json.loads(ds_zero_stage(text, "ds.json", facts)[0])["zero_optimization"]
    assert zero["stage"] == stage and ("offload_optimizer" in zero) == offloaded


@pytest.mark.parametrize("text, facts", [
    ('{"zero_optimization": {"stage": 3}}', {}),  # already at the target: offload only on request
    ('{"zero_optimization": {"stage": 3}}', {"zero_stage": 2}),  # never lowered
    ('{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "none"}, '
     '"offload_param": {"device": "nvme"}}}', {"offload": "cpu"}),  # offload chosen already: left to the user
    ('{"zero_optimization": {"stage": "auto"}}', {}),  # not a number to raise
    ('{"zero_optimization": {"stage": 1}}', {"zero_stage": 5}),
])
def test_what_is_already_as_high_or_cannot_be_read_is_left_alone(text, facts):
    with pytest.raises(NotApplicable):
        ds_zero_stage(text, "ds.json", facts)


def test_strings_with_braces_and_quotes_do_not_confuse_the_reading():
    text = '{"name": "a {tricky} \\"one\\"", "zero_optimization": {"note": "}{", "stage": 1}}'
    out, _ = ds_zero_stage(text, "ds.json", {"zero_stage": 2})
    assert json.loads(out) == {"name": 'a {tricky} "one"', "zero_optimization": {"note": "}{", "stage": 2}}


@pytest.mark.parametrize("text", ['{"zero_optimization": {"stage": 1}, "zero_optimization": {"stage": 2}}',
                                  '{"zero_optimization": {"stage": 1, "stage": 2}}'])
def test_a_key_twice_in_one_object_is_refused_not_edited_where_it_does_not_count(text):
    """QA23 A8: the plan read stage 2 (json keeps the last) and edited the first object, so stage 2 still ran."""
    from gpudoctor.engine.fixes.errors import FixError

    with pytest.raises(FixError, match="appears twice"):
        ds_zero_stage(text, "ds.json", {"stage": 3})
