"""This session's fixes run for real on CPU with gloo: each twin's behaviour before its fix and after (two ranks as
child processes, bounded; see test_behaviour.run_ranks)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

from test_behaviour import DATA, run_ranks  # noqa: E402  (the runner after the skip)


def _pair(tmp_path: Path, entry: str, name: str) -> tuple[Path, Path]:
    """The twin script and, in tmp_path, its .fixed text as a script of its own."""
    before = DATA / entry / name
    after = tmp_path / name.replace(".py", "_fixed.py")
    after.write_text(Path(str(before) + ".fixed").read_text())
    return before, after


def _found(script: Path, pattern: str, env: dict | None = None) -> list[re.Match]:
    """Run the ranks; both must exit 0 and print a line matching pattern."""
    codes, outs, _ = run_ranks(script, extra_env=env)
    assert codes == [0, 0], outs
    found = [re.search(pattern, out) for out in outs]
    assert all(found), outs
    return found


def _reduces_and_weights(script: Path) -> tuple[tuple[int, ...], tuple[list[float], ...]]:
    found = _found(script, r"all-reduces (\d+) weights ([-\d. ]+)")
    return tuple(int(f.group(1)) for f in found), tuple([float(v) for v in f.group(2).split()] for f in found)


def test_p6_accumulation_reduces_once_per_step_after_the_fix_with_the_same_weights(tmp_path):
    before, after = _pair(tmp_path, "P6", "gloo_accumulate.py")
    counts, weights = _reduces_and_weights(before)
    assert counts == (8, 8)  # 8 micro-batches, a bucket all-reduced after each backward
    fixed_counts, fixed_weights = _reduces_and_weights(after)
    assert fixed_counts == (2, 2)  # once per optimizer step (every 4th micro-batch)
    for a, b in zip(weights[0], fixed_weights[0]):  # the same training: averaged sums equal summed averages
        assert abs(a - b) < 1e-5
    assert fixed_weights[0] == fixed_weights[1]  # and the ranks still agree


def test_d14_gradients_reduced_in_bf16_before_the_fix_and_in_float32_after(tmp_path):
    before, after = _pair(tmp_path, "D14", "gloo_fsdp2_bf16.py")
    # reduce_dtype unset follows param_dtype: every reduced gradient is a bf16 value stored in float32
    assert [f.group(1) for f in _found(before, r"grads torch.float32 bf16-rounded (\w+)")] == ["True", "True"]
    assert [f.group(1) for f in _found(after, r"grads torch.float32 bf16-rounded (\w+)")] == ["False", "False"]


def test_d12_one_fsdp_unit_before_the_fix_and_one_per_block_after(tmp_path):
    from gpudoctor.engine.fixes import plan_fix
    from gpudoctor.engine.fixes.apply import apply_plan
    from gpudoctor.kb.catalog import load_catalog

    before = DATA / "D12" / "gloo_units.py"
    after = tmp_path / "gloo_units.py"
    after.write_text(before.read_text())
    # the user's --param: the test's blocks hold 4,160 parameters each, far under the 100M default
    plan = plan_fix(load_catalog(use_cache=False), "D12", script=str(after), facts={"min_num_params": 4000})
    assert apply_plan(plan, state_dir=tmp_path / "state").written == (str(after),)

    def units_and_loss(script):
        return [(int(f.group(1)), f.group(2)) for f in _found(script, r"fsdp units (\d+) loss (\S+)")]

    root_only = units_and_loss(before)
    assert [u for u, _ in root_only] == [1, 1]  # the root is the only unit
    wrapped = units_and_loss(after)
    assert [u for u, _ in wrapped] == [5, 5]  # each of the 4 blocks, and the root
    assert [loss for _, loss in wrapped] == [loss for _, loss in root_only]  # the same model, computed the same


def test_p5_ranks_hold_different_weights_before_the_fix_and_rank0s_after(tmp_path):
    before, after = _pair(tmp_path, "P5", "gloo_init_after_wrap.py")

    def checksums(script):
        return [f.group(1) for f in _found(script, r"checksum (\S+)")]

    drawn = checksums(before)
    assert drawn[0] != drawn[1]  # each rank re-drew the weights after DDP's one broadcast
    synced = checksums(after)
    assert synced[0] == synced[1] == drawn[0]  # the init on rank 0's generator, broadcast by DDP to every rank


def test_d26_ddp_refuses_a_head_added_on_rank0_before_the_fix_and_wraps_it_after(tmp_path):
    before, after = _pair(tmp_path, "D26", "gloo_head_on_rank0.py")
    _found(before, r"DDP refused: DDP expects same model across all ranks")
    codes, outs, _ = run_ranks(after)
    assert codes == [0, 0], outs
    assert [re.search(r"wrapped (\d+) parameters", out).group(1) for out in outs] == ["323", "323"], outs
    assert "rank 0 replaced the head" in outs[0] and "replaced" not in outs[1]  # the print stays on rank 0


def test_d20_a_skip_on_one_rank_hangs_the_group_before_the_fix_and_every_rank_skips_after(tmp_path):
    before, after = _pair(tmp_path, "D20", "gloo_skip_nan_step.py")
    # before: rank 1 skips its NaN step alone; rank 0's extra all-reduce then waits for a partner until the 3 s
    # timeout ends both ranks (bounded: they exit on their own)
    codes, outs, _ = run_ranks(before, extra_env={"TRAIN_DIST_TIMEOUT": "3"})
    assert None not in codes and codes != [0, 0], outs
    assert re.search(r"Timed out|Connection (closed|reset)", outs[0] + outs[1]), outs
    assert "finished" not in outs[0]
    # after: the same poisoned batch, now skipped by both ranks (a longer timeout, so load alone cannot fail them)
    found = _found(after, r"finished after (\d+) steps checksum (\S+)", {"TRAIN_DIST_TIMEOUT": "60"})
    assert [f.group(1) for f in found] == ["5", "5"] and found[0].group(2) == found[1].group(2)


def test_d13_shard_grad_op_gathers_each_unit_once_per_step_where_full_shard_gathered_twice(tmp_path):
    from gpudoctor.engine.fixes import plan_fix
    from gpudoctor.engine.fixes.apply import apply_plan
    from gpudoctor.kb.catalog import load_catalog

    before = DATA / "D13" / "gloo_gathers.py"
    after = tmp_path / "gloo_gathers.py"
    after.write_text(before.read_text())
    plan = plan_fix(load_catalog(use_cache=False), "D13", script=str(after), facts={"sharding_strategy": "SHARD_GRAD_OP"})
    assert apply_plan(plan, state_dir=tmp_path / "state").written == ()  # unsafe: not without --unsafe
    assert apply_plan(plan, unsafe=True, state_dir=tmp_path / "state").written == (str(after),)

    def gathers_and_loss(script):
        return [(int(f.group(1)), f.group(2)) for f in _found(script, r"gathers (\d+) loss (\S+)")]

    full = gathers_and_loss(before)
    # FULL_SHARD (FSDP's default): 5 units gathered in forward, the 4 non-root ones again in backward
    assert [g for g, _ in full] == [9, 9]
    grad_op = gathers_and_loss(after)
    assert [g for g, _ in grad_op] == [5, 5]  # parameters kept whole from forward to backward
    assert [loss for _, loss in grad_op] == [loss for _, loss in full]  # the same model, computed the same


def test_d11_two_ranks_step_with_twice_the_lr_after_the_fix(tmp_path):
    from gpudoctor.engine.fixes import plan_fix
    from gpudoctor.engine.fixes.apply import apply_plan
    from gpudoctor.kb.catalog import load_catalog

    before = DATA / "D11" / "gloo_lr.py"
    after = tmp_path / "gloo_lr.py"
    after.write_text(before.read_text())
    plan = plan_fix(load_catalog(use_cache=False), "D11", script=str(after))
    assert apply_plan(plan, unsafe=True, state_dir=tmp_path / "state").written == (str(after),)

    def lr_and_move(script):
        return [(float(f.group(1)), float(f.group(2))) for f in _found(script, r" lr (\S+) moved (\S+)")]

    old, new = lr_and_move(before), lr_and_move(after)
    assert [lr for lr, _ in old] == [0.05, 0.05]
    assert [lr for lr, _ in new] == [0.1, 0.1]  # world size 2
    for (_, a), (_, b) in zip(old, new):  # the same averaged gradient, a step twice as long
        assert abs(b - 2 * a) < 1e-5
