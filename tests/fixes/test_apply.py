"""apply.py: refuses broken results and stale files before writing, keeps modes, journals, undoes byte for byte."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpudoctor.engine.fixes import BrokenResultError, FixError, StaleFileError
from gpudoctor.engine.fixes.apply import apply_plan, state_dir, undo_last
from gpudoctor.engine.fixes.env import env_file_edit
from gpudoctor.engine.fixes.model import FileEdit, FixPlan, PlannedFix, sha256_text


def _plan(*edits, safety="safe"):
    fix = PlannedFix(entry_id="X1", action_id="a", kind="patch", safety=safety, title="t", why="", edits=tuple(edits))
    return FixPlan(entry_id="X1", fixes=(fix,))


def _edit(path, before, after):
    return FileEdit(path=str(path), before_sha256=sha256_text(before), before=before, after=after)


def test_a_result_that_does_not_parse_is_refused_before_anything_is_written(tmp_path):
    good, bad = tmp_path / "a.py", tmp_path / "b.json"
    good.write_text("x = 1\n")
    bad.write_text('{"a": 1}\n')
    plan = _plan(_edit(good, "x = 1\n", "x = 2\n"), _edit(bad, '{"a": 1}\n', '{"a": 1,}\n'))
    with pytest.raises(BrokenResultError, match="b.json.*does not parse"):
        apply_plan(plan, state_dir=tmp_path / "state")
    assert good.read_text() == "x = 1\n" and bad.read_text() == '{"a": 1}\n'
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("name, after", [("t.py", "def f(:\n"), ("c.yaml", "a: [1\n")])
def test_python_and_yaml_results_are_checked_too(tmp_path, name, after):
    path = tmp_path / name
    path.write_text("a = 1\n" if name.endswith(".py") else "a: 1\n")
    with pytest.raises(BrokenResultError):
        apply_plan(_plan(_edit(path, path.read_text(), after)), state_dir=tmp_path / "s")


def test_mode_and_crlf_bytes_are_kept_and_undo_is_exact(tmp_path):
    path = tmp_path / "run.py"
    original = b"#!/usr/bin/env python\r\nx = 1\r\n"
    path.write_bytes(original)
    path.chmod(0o751)
    text = original.decode()
    apply_plan(_plan(_edit(path, text, text.replace("x = 1", "x = 2"))), state_dir=tmp_path / "s")
    assert path.read_bytes() == b"#!/usr/bin/env python\r\nx = 2\r\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".gpudoctor-tmp")]
    undo_last(state_dir=tmp_path / "s")
    assert path.read_bytes() == original and stat.S_IMODE(path.stat().st_mode) == 0o751


def test_undo_refuses_when_the_file_changed_after_apply(tmp_path):
    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    apply_plan(_plan(_edit(path, "x = 1\n", "x = 2\n")), state_dir=tmp_path / "s")
    path.write_text("x = 3\n")
    with pytest.raises(StaleFileError, match="changed since gpudoctor applied"):
        undo_last(state_dir=tmp_path / "s")
    assert path.read_text() == "x = 3\n"


def test_undo_goes_back_one_apply_at_a_time_then_says_nothing_to_undo(tmp_path):
    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    apply_plan(_plan(_edit(path, "x = 1\n", "x = 2\n")), state_dir=tmp_path / "s")
    apply_plan(_plan(_edit(path, "x = 2\n", "x = 3\n")), state_dir=tmp_path / "s")
    undo_last(state_dir=tmp_path / "s")
    assert path.read_text() == "x = 2\n"
    undo_last(state_dir=tmp_path / "s")
    assert path.read_text() == "x = 1\n"
    with pytest.raises(FixError, match="nothing to undo"):
        undo_last(state_dir=tmp_path / "s")


def test_a_created_env_file_is_removed_by_undo_and_stale_creation_refused(tmp_path):
    path = tmp_path / "job.env"
    edit = env_file_edit(str(path), None, (("NCCL_SOCKET_IFNAME", "^docker0,lo"),))
    assert edit.creates and edit.after == "export NCCL_SOCKET_IFNAME='^docker0,lo'\n"
    path.write_text("export A=1\n")  # appeared between preview and apply
    with pytest.raises(StaleFileError, match="exists now"):
        apply_plan(_plan(edit), state_dir=tmp_path / "s")
    path.unlink()
    apply_plan(_plan(edit), state_dir=tmp_path / "s")
    assert path.read_text() == edit.after
    undo_last(state_dir=tmp_path / "s")
    assert not path.exists()


def test_env_file_line_is_replaced_in_place(tmp_path):
    before = "# cluster\nexport NCCL_SOCKET_IFNAME=eth\nexport OMP_NUM_THREADS=4\n"
    edit = env_file_edit("x.env", before, (("NCCL_SOCKET_IFNAME", "ens5"), ("NCCL_IB_DISABLE", "1")))
    assert edit.after == "# cluster\nexport NCCL_SOCKET_IFNAME=ens5\nexport OMP_NUM_THREADS=4\nexport NCCL_IB_DISABLE=1\n"
    assert env_file_edit("x.env", edit.after, (("NCCL_SOCKET_IFNAME", "ens5"),)) is None


def test_state_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_STATE_DIR", str(tmp_path / "st"))
    assert state_dir() == tmp_path / "st"
    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    result = apply_plan(_plan(_edit(path, "x = 1\n", "x = 2\n")))
    assert result.journal.startswith(str(tmp_path / "st" / "journal"))
    assert undo_last().restored == (str(path),)


def test_display_only_is_never_written(tmp_path):
    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    result = apply_plan(_plan(_edit(path, "x = 1\n", "x = 2\n"), safety="display-only"), unsafe=True,
                        state_dir=tmp_path / "s")
    assert result.written == () and result.skipped[0][1].startswith("display-only")
    assert path.read_text() == "x = 1\n"


def test_a_symlink_stays_a_link_and_its_target_is_written(tmp_path):
    real = tmp_path / "real.py"
    real.write_text("x = 1\n")
    link = tmp_path / "train.py"
    link.symlink_to(real)
    result = apply_plan(_plan(_edit(link, "x = 1\n", "x = 2\n")), state_dir=tmp_path / "s")
    assert result.written == (str(link),)
    assert link.is_symlink() and real.read_text() == "x = 2\n"
    undo_last(state_dir=tmp_path / "s")
    assert link.is_symlink() and real.read_text() == "x = 1\n"


def test_a_write_failure_rolls_back_and_writes_nothing(tmp_path, monkeypatch):
    from gpudoctor.engine.fixes import apply as apply_mod

    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 1\n")
    real, calls = apply_mod.write_atomic, []

    def failing(path, data, mode):  # the disk fills up on the second file
        calls.append(path)
        if path == str(b):
            raise OSError(28, "No space left on device", path)
        return real(path, data, mode)

    monkeypatch.setattr(apply_mod, "write_atomic", failing)
    with pytest.raises(FixError, match="No space left on device"):
        apply_plan(_plan(_edit(a, "x = 1\n", "x = 2\n"), _edit(b, "y = 1\n", "y = 2\n")), state_dir=tmp_path / "s")
    assert str(a) in calls and str(b) in calls
    assert a.read_text() == "x = 1\n" and b.read_text() == "y = 1\n"
    with pytest.raises(FixError, match="nothing to undo"):
        undo_last(state_dir=tmp_path / "s")


def test_a_byte_order_mark_is_kept(tmp_path):
    from gpudoctor.engine.fixes import plan_fix
    from gpudoctor.kb.catalog import load_catalog

    source = (Path(__file__).resolve().parent.parent / "data" / "fixes" / "MN3" / "no_timeout.py").read_bytes()
    path = tmp_path / "t.py"
    path.write_bytes(b"\xef\xbb\xbf" + source)
    plan = plan_fix(load_catalog(use_cache=False), "MN3", script=str(path))
    apply_plan(plan, state_dir=tmp_path / "s")
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b"timeout=timedelta(minutes=10)" in data


def test_a_state_folder_that_cannot_be_made_is_a_clear_error_and_nothing_is_written(cli_proc, tmp_path):
    source = (Path(__file__).resolve().parent.parent / "data" / "fixes" / "MN3" / "no_timeout.py").read_bytes()
    script = tmp_path / "t.py"
    script.write_bytes(source)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the state folder would go\n")
    r = cli_proc("fix", "MN3", "--script", str(script), "--apply", env={"GPUDOCTOR_STATE_DIR": str(blocked / "s")})
    assert r.code == 2 and "GPUDOCTOR_STATE_DIR" in r.err and "internal error" not in r.err, r.err
    assert script.read_bytes() == source


def test_backups_and_journal_folders_are_private_whatever_the_umask(tmp_path):
    path = tmp_path / "secret_train.py"
    path.write_text('KEY = "sk-secret"\nx = 1\n')
    path.chmod(0o600)
    old = os.umask(0o022)
    try:
        result = apply_plan(_plan(_edit(path, path.read_text(), path.read_text().replace("x = 1", "x = 2"))),
                            state_dir=tmp_path / "s")
    finally:
        os.umask(old)
    journal = Path(result.journal)
    assert stat.S_IMODE((journal / "backup-0").stat().st_mode) == 0o600
    assert stat.S_IMODE(journal.stat().st_mode) == 0o700 and stat.S_IMODE(journal.parent.stat().st_mode) == 0o700


def test_a_read_only_file_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "ro.py"
    path.write_text("x = 1\n")
    path.chmod(0o444)
    with pytest.raises(FixError, match="read-only") as raised:
        apply_plan(_plan(_edit(path, "x = 1\n", "x = 2\n")), state_dir=tmp_path / "s")
    assert path.read_text() == "x = 1\n" and not (tmp_path / "s").exists()
    # one sentence the CLI prints as it is, never the repr of an args tuple (QA24 R4)
    assert str(raised.value) == f"{path}: read-only; nothing was written (make it writable first if the fix is wanted)"


def test_an_edit_saved_while_the_journal_is_written_is_kept_and_nothing_changes(tmp_path, monkeypatch):
    import gpudoctor.engine.fixes.apply as apply_mod

    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    real = apply_mod._new_journal

    def editor_saves(base):
        path.write_text("x = 1\ny = 5\n")  # the user's editor lands here
        return real(base)

    monkeypatch.setattr(apply_mod, "_new_journal", editor_saves)
    with pytest.raises(StaleFileError, match="changed while"):
        apply_plan(_plan(_edit(path, "x = 1\n", "x = 2\n")), state_dir=tmp_path / "s")
    assert path.read_text() == "x = 1\ny = 5\n"
