"""Fix and Lint views on engine.fixes / engine.lint: Apply only after yes, Undo, unsafe says why, findings inline."""
from __future__ import annotations

import shutil

import pytest

from gpudoctor.tui.screens.confirm import ConfirmScreen
from gpudoctor.tui.screens.entry import EntryScreen
from gpudoctor.tui.screens.fix import FixScreen
from gpudoctor.tui.screens.lint import LintScreen
from gpudoctor.tui.widgets.logview import LogView

from .conftest import ROOT, wait_until

FIXES = ROOT / "tests" / "data" / "fixes"


@pytest.fixture
def state(tmp_path, monkeypatch):
    folder = tmp_path / "state"
    monkeypatch.setenv("GPUDOCTOR_STATE_DIR", str(folder))
    return folder


def copy(tmp_path, entry: str, name: str):
    target = tmp_path / "train.py"
    shutil.copy(FIXES / entry / name, target)
    return target, (FIXES / entry / (name + ".fixed")).read_text()


def journals(state) -> list:
    folder = state / "journal"
    return sorted(folder.iterdir()) if folder.exists() else []


async def open_fix(app, pilot, entry: str, script):
    app.open_fix(entry, script=str(script) if script is not None else None)
    await wait_until(pilot, lambda: isinstance(app.screen, FixScreen) and app.screen.plan is not None, what="plan")
    return app.screen


async def test_apply_writes_only_after_yes_and_undo_restores(make, tmp_path, state):
    script, fixed = copy(tmp_path, "D21", "eval_on_rank0.py")
    original = script.read_bytes()
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_fix(app, pilot, "D21", script)
        assert screen.plan.applicable(False)
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("n")
        await wait_until(pilot, lambda: app.screen is screen)
        await pilot.pause(0.3)
        assert script.read_bytes() == original and journals(state) == []  # no: nothing written
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("escape")  # esc is a no too
        await wait_until(pilot, lambda: app.screen is screen)
        await pilot.pause(0.3)
        assert script.read_bytes() == original
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_until(pilot, lambda: screen.last_result is not None, what="the write")
        assert script.read_text() == fixed
        assert screen.last_result.written == (str(script),) and len(journals(state)) == 1
        await pilot.press("u")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_until(pilot, lambda: hasattr(screen.last_result, "restored"), what="the undo")
        assert script.read_bytes() == original


async def test_unsafe_fix_says_why_and_needs_its_own_key(make, tmp_path, state):
    script, fixed = copy(tmp_path, "D8", "aux_head_unused.py")
    original = script.read_bytes()
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_fix(app, pilot, "D8", script)
        unsafe = [f for f in screen.plan.fixes if f.safety == "unsafe" and f.edits]
        assert unsafe and not screen.plan.applicable(False)
        assert "why it is unsafe: " + unsafe[0].why[:40] in screen.shown_text
        await pilot.press("a")  # safe only: nothing to write, no question asked
        await pilot.pause(0.3)
        assert app.screen is screen and script.read_bytes() == original
        await pilot.press("A")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert unsafe[0].why[:40] in app.screen.detail
        await pilot.press("y")
        await wait_until(pilot, lambda: screen.last_result is not None, what="the write")
        assert script.read_text() == fixed


async def test_a_file_changed_after_the_preview_is_not_overwritten(make, tmp_path, state):
    script, _ = copy(tmp_path, "D21", "eval_on_rank0.py")
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_fix(app, pilot, "D21", script)
        script.write_text(script.read_text() + "# edited meanwhile\n")
        edited = script.read_bytes()
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_until(pilot, lambda: "planned again" in str(screen.query_one("#fix-status").render())
                         and "fix(es)" in str(screen.query_one("#fix-status").render()),
                         what="the stale-file message and the new plan")
        assert script.read_bytes() == edited and journals(state) == []
        assert "gpudoctor fix again" not in str(screen.query_one("#fix-status").render())
        await pilot.press("a")  # the new plan is made from the edited file: applying it now works
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_until(pilot, lambda: screen.last_result is not None, what="the write")
        assert "# edited meanwhile" in script.read_text() and script.read_bytes() != edited


async def test_apply_with_nothing_to_write_says_so_where_it_stays(make, tmp_path, state):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_fix(app, pilot, "D20", None)
        await pilot.press("a")
        await pilot.pause(0.3)
        assert "nothing written: no fix here edits a file" in str(screen.query_one("#fix-status").render())


async def test_lint_shows_findings_inline_linked_to_entry_and_fix(make, tmp_path, state):
    from gpudoctor.engine.lint import lint_paths

    script, fixed = copy(tmp_path, "D21", "eval_on_rank0.py")
    expected = lint_paths([str(script)]).findings
    assert expected
    app = make(script=str(script))  # --script alone opens on the lint view
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LintScreen) and app.screen.result is not None
                         and app.screen.logfile is not None, what="lint")
        screen = app.screen
        assert screen.result.findings == expected
        view = screen.query_one(LogView)
        assert view.evidence == {f.line for f in expected}
        await wait_until(pilot, lambda: view.cursor == expected[0].line and expected[0].line in view.rendered_lines,
                         what="the finding's line in view")
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FixScreen) and app.screen.plan is not None)
        assert app.screen.entry_id == expected[0].entry_id and app.screen.script == str(script)
        assert any(f.action_id == expected[0].fix_id for f in app.screen.plan.fixes)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, EntryScreen))
        assert app.screen.entry_id == expected[0].entry_id


async def test_lint_names_an_unparsable_script(make, tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("def f(:\n    pass\n")
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_lint(str(bad))
        await wait_until(pilot, lambda: isinstance(app.screen, LintScreen) and app.screen.result is not None)
        assert app.screen.result.errors
        assert "broken.py" in str(app.screen.query_one("#lint-status").render())


async def test_a_command_fix_is_planned_from_the_command_and_params_typed_on_the_fix_screen(make, state):
    app = make()
    async with app.run_test(size=(100, 24)) as pilot:
        app.open_fix("MN8")
        await wait_until(pilot, lambda: isinstance(app.screen, FixScreen) and app.screen.plan is not None, what="plan")
        screen = app.screen
        assert not screen.plan.fixes and "press c and give the launch command" in screen.shown_text  # QA23 T1: keys, not CLI options
        screen.query_one("#fix-params").value = "bad_gpu=nine"
        await pilot.press("c")
        await pilot.press(*"torchrun --nproc-per-node=4 train.py")
        first = screen.plan
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.plan is not first, what="the new plan")
        assert not screen.plan.fixes and "expected the GPU's index" in screen.shown_text
        screen.query_one("#fix-params").value = "bad_gpu=2 nope"
        screen.query_one("#fix-params").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: "expected KEY=VALUE" in str(screen.query_one("#fix-status").render()),
                         what="the bad param named")
        second = screen.plan
        screen.query_one("#fix-params").value = "bad_gpu=2"
        screen.query_one("#fix-params").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.plan is not second, what="the plan with the GPU")
        [fix] = screen.plan.fixes
        assert fix.commands == ("CUDA_VISIBLE_DEVICES=0,1,3 torchrun --nproc-per-node=3 train.py",)
        assert "$ CUDA_VISIBLE_DEVICES=0,1,3 torchrun" in screen.shown_text


async def test_a_fix_opened_from_a_finding_leads_with_the_step_its_log_calls_for(make, state):
    """D23 from HF Trainer 4.36's staging-folder race: upgrade transformers; the user's rank-zero patch is not planned."""
    from gpudoctor.tui.screens.logs import LogScreen

    log = ROOT / "tests" / "data" / "logs" / "D23" / "axolotl-948-tmp-checkpoint-rename-race.log"
    app = make()
    async with app.run_test(size=(100, 30)) as pilot:
        app.open_logs([str(log)])
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None,
                         what="the diagnosis")
        assert app.screen.diagnosis.findings[0].pointed.step == 4
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FixScreen) and app.screen.plan is not None, what="plan")
        text = " ".join(app.screen.shown_text.split())
        assert "what this log calls for (step 4 of 6): When the duplicate save is inside a framework" in text
        assert "pip install -U 'transformers>=4.37'" in text
        assert not app.screen.plan.fixes and "rank-zero-side-effects: not planned" in text


async def test_lint_view_shows_the_launch_commands_findings_beside_the_scripts(make, tmp_path):
    """`gpudoctor tui --script train.py --cmd '...'`: the command's D2 and MN5 are listed as `lint --cmd` lists
    them, marked as the command's and never pointing at a line of the script (QA23 T1)."""
    from gpudoctor.engine.lint import lint_paths
    from gpudoctor.engine.lint.command import COMMAND

    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\nfor step in range(9):\n"
                      "    pass\n")
    cmd = "torchrun --standalone --nnodes=2 --max-restarts=3 --nproc-per-node=2 train.py"
    own = lint_paths([str(script)]).findings
    app = make(script=str(script), cmd=cmd)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LintScreen) and app.screen.result is not None
                         and app.screen.logfile is not None, what="lint")
        screen = app.screen
        from_cmd = [f for f in screen.result.findings if f.path == COMMAND]
        assert sorted(f.entry_id for f in from_cmd) == ["D2", "MN5"]
        assert [f for f in screen.result.findings if f.path != COMMAND] == list(own)
        assert screen.query_one(LogView).evidence == {f.line for f in own}
        assert "and the launch command" in str(screen.query_one("#lint-status").render())


async def test_lint_view_reads_the_script_again_after_a_fix_is_applied_and_undone(make, tmp_path, state):
    """QA24 T1: back from the fix view after Apply, the lint view still listed the finding the fix had removed and
    showed the old source lines."""
    from gpudoctor.engine.lint import lint_paths

    script, fixed = copy(tmp_path, "D21", "eval_on_rank0.py")
    before = lint_paths([str(script)]).findings
    assert "D21" in [f.entry_id for f in before]
    app = make(script=str(script))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LintScreen) and app.screen.result is not None
                         and app.screen.logfile is not None, what="lint")
        screen = app.screen
        screen.query_one("#lint-findings").highlighted = [f.entry_id for f in before].index("D21")
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FixScreen) and app.screen.plan is not None)
        fix = app.screen
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        await pilot.press("y")
        await wait_until(pilot, lambda: app.screen is fix and script.read_text() == fixed, what="applied")
        await pilot.press("escape")
        after = lint_paths([str(script)]).findings
        await wait_until(pilot, lambda: app.screen is screen and screen.result is not None
                         and screen.result.findings == after, what="the findings of the fixed script")
        assert "D21" not in [f.entry_id for f in screen.result.findings]
        await wait_until(pilot, lambda: screen.logfile is not None
                         and screen.logfile.line_count == len(fixed.splitlines()), what="the fixed source")
        # and back again after an undo from the fix view
        app.open_fix("D21", script=str(script))
        await wait_until(pilot, lambda: isinstance(app.screen, FixScreen) and app.screen.plan is not None)
        await pilot.press("u")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the undo question")
        await pilot.press("y")
        await wait_until(pilot, lambda: "D21" in [f.entry_id for f in lint_paths([str(script)]).findings], what="undone")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen and screen.result is not None
                         and screen.result.findings == before, what="the findings of the restored script")


@pytest.mark.parametrize("typed, items", [
    ("sample_input=torch.zeros(1, 32, device=dev) port=29500",
     ["sample_input=torch.zeros(1, 32, device=dev)", "port=29500"]),
    ("sample_input='torch.zeros(1, 32)'   bad_gpu=3", ["sample_input=torch.zeros(1, 32)", "bad_gpu=3"]),
    ('checkpoint="/runs/my run/ckpt" bad_gpu=2 nope', ["checkpoint=/runs/my run/ckpt", "bad_gpu=2", "nope"]),
    ("", []),
])
def test_the_params_field_splits_where_a_shell_would(typed, items):
    """QA24 T3: the field was split on every space, so `sample_input=torch.zeros(1, 32)` became two items and the
    D26 lazy-layer fix could not be given its input from the TUI."""
    from gpudoctor.engine.fixes.facts import split_params

    assert split_params(typed) == items


async def test_the_lazy_layer_fix_takes_its_sample_input_from_the_params_field(make, tmp_path, state):
    script = tmp_path / "lazy.py"
    script.write_text("import torch\nimport torch.distributed as dist\n"
                      "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
                      "dist.init_process_group('gloo')\nmodel = torch.nn.Sequential(torch.nn.LazyLinear(2))\n"
                      "model = DDP(model)\n")
    app = make()
    async with app.run_test(size=(100, 30)) as pilot:
        app.open_fix("D26", script=str(script))
        await wait_until(pilot, lambda: isinstance(app.screen, FixScreen) and app.screen.plan is not None, what="plan")
        screen = app.screen
        first = screen.plan
        screen.query_one("#fix-params").value = "sample_input=torch.zeros(1, 4)"
        screen.query_one("#fix-params").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.plan is not first, what="the plan with the input")
        assert "model(torch.zeros(1, 4))" in screen.shown_text


async def test_linting_a_folder_names_each_findings_file_shows_its_source_and_fixes_that_file(make, tmp_path, state):
    """QA25 Q7: rows carried no file name, the source pane stayed blank, and `f` planned against the folder."""
    from textual.widgets import OptionList

    shutil.copy(FIXES / "D21" / "eval_on_rank0.py", tmp_path / "a.py")
    shutil.copy(ROOT / "tests" / "data" / "lint" / "buggy" / "d22_sampler_without_set_epoch.py", tmp_path / "b.py")
    app = make()
    async with app.run_test(size=(120, 30)) as pilot:
        app.open_lint(str(tmp_path))
        await wait_until(pilot, lambda: isinstance(app.screen, LintScreen) and app.screen.result is not None
                         and app.screen.logfile is not None, what="lint and the first finding's source")
        screen = app.screen
        findings = screen.result.findings
        files = [f.path.rsplit("/", 1)[-1] for f in findings]
        assert {"a.py", "b.py"} <= set(files)
        options = screen.query_one("#lint-findings", OptionList)
        assert all(str(options.get_option_at_index(k).prompt).startswith(name) for k, name in enumerate(files))
        assert screen.logfile.path == findings[0].path
        k = next(k for k, f in enumerate(findings) if f.path.endswith("b.py"))
        options.highlighted = k
        await wait_until(pilot, lambda: screen.logfile.path.endswith("b.py"), what="b.py's source")
        assert screen.query_one(LogView).evidence == {f.line for f in findings if f.path.endswith("b.py")}
        if findings[k].fix_id:
            await pilot.press("f")
            await wait_until(pilot, lambda: isinstance(app.screen, FixScreen) and app.screen.plan is not None)
            assert app.screen.script == findings[k].path
