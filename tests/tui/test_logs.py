"""Log view: findings with tier and score, evidence lines lit and scrolled to, ranks on a timeline, cancel, paste."""
from __future__ import annotations

import os

from textual.worker import WorkerState

from gpudoctor.tui.screens.logs import LogScreen
from gpudoctor.tui.screens.open import OpenScreen
from gpudoctor.tui.widgets.logview import LogView

from .conftest import EXAMPLE, LOGS, wait_until

D8_LOG = LOGS / "D8" / "aux-head-unused-torchrun.log"


def visible(log: LogView) -> range:
    top = int(log.scroll_offset.y)
    return range(top + 1, top + log.scrollable_content_region.height + 1)


def line_style(log: LogView, number: int):
    y = number - 1 - int(log.scroll_offset.y)
    strip = log.render_line(y)
    return [seg.style for seg in strip if seg.text.strip()][-1]


async def open_log(app, pilot, paths):
    app.open_logs([str(p) for p in paths])
    await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None,
                     what="the diagnosis")
    return app.screen


async def test_evidence_lines_are_highlighted_and_scrolled_to(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_log(app, pilot, [D8_LOG])
        top = screen.diagnosis.findings[0]
        assert top.id == "D8"
        assert getattr(top, "tier", "match") == "match"
        log = screen.query_one(LogView)
        lines = [ev.line for ev in top.evidence if ev.line > 0]
        await wait_until(pilot, lambda: log.cursor == lines[0] and lines[0] in visible(log), what="scroll to evidence")
        assert log.evidence == set(lines)
        assert lines[0] in log.rendered_lines
        # the lit line is drawn in the evidence style; a line that is not evidence is not
        plain = next(n for n in visible(log) if n not in log.evidence and n <= log.lines_known)
        assert line_style(log, lines[0]) != line_style(log, plain)
        assert line_style(log, lines[0]).bold
        if len(lines) > 1:
            await pilot.press("n")
            await wait_until(pilot, lambda: log.cursor == lines[1] and lines[1] in visible(log), what="next evidence")
            await pilot.press("N")
            await wait_until(pilot, lambda: log.cursor == lines[0], what="previous evidence")
        # the log line the diagnosis cites is the line the view shows
        assert log.logfile.lines(lines[0] - 1, 1)[0].strip() in top.evidence[0].text.strip() or \
            top.evidence[0].text.strip() in log.logfile.lines(lines[0] - 1, 1)[0]


async def test_per_rank_logs_show_a_timeline_with_the_first_to_die(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_log(app, pilot, [EXAMPLE])
        timeline = screen.query_one("#timeline")
        ranks = screen.diagnosis.ranks
        assert len(timeline.rows) == len(ranks) > 1
        first = [row for row in timeline.rows if row["first"]]
        assert [row["rank"] for row in first] == [2]
        assert first[0]["note"] == "died first"
        assert timeline.display
        # evidence in another rank's file: the view switches to that file
        ev = screen.diagnosis.findings[0].evidence[0]
        await wait_until(pilot, lambda: screen.current == ev.file, what="the evidence file")
        await pilot.press("t")
        assert not timeline.display


async def test_log_text_is_sanitised(make, tmp_path):
    path = tmp_path / "evil.log"
    path.write_bytes(b"ok line\n\x1b]0;owned\x07title \x1b[2Jclear \x08back \xe2\x80\xaeRTL\x00nul\n" * 3)
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_logs([str(path)])
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.files, what="file open")
        log = app.screen.query_one(LogView)
        await wait_until(pilot, lambda: log.lines_known == 6, what="index")
        await pilot.pause(0.2)
        text = "".join(seg.text for y in range(6) for seg in log.render_line(y))
        assert "title" in text and "RTL" in text
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c == "\u202e" for c in text)


# A diagnosis child that reports progress, starts a grandchild in its group, and then never returns: a scan
# stuck in one search. esc must end it at once, grandchild included.
STUCK_CHILD = """
import os, pickle, struct, subprocess, sys, time
job = pickle.load(sys.stdin.buffer)
sleeper = subprocess.Popen(["sleep", "300"])
with open(os.environ["GPUDOCTOR_TEST_PIDS"], "w") as fh:
    fh.write(f"{os.getpid()} {sleeper.pid}")
body = pickle.dumps(("progress", 1 << 20))
sys.stdout.buffer.write(struct.pack(">Q", len(body)) + body)
sys.stdout.buffer.flush()
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead; only its parent's wait removes it
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def stuck_child(tmp_path, monkeypatch):
    """The TUI's diagnosis child replaced by STUCK_CHILD; the file where it writes its pid and its grandchild's."""
    import sys

    from gpudoctor.tui import diagnose_child

    script, pids = tmp_path / "stuck.py", tmp_path / "pids"
    script.write_text(STUCK_CHILD)
    monkeypatch.setattr(diagnose_child, "CHILD", [sys.executable, str(script)])
    monkeypatch.setenv("GPUDOCTOR_TEST_PIDS", str(pids))
    return pids


async def test_a_stuck_diagnosis_shows_progress_and_esc_kills_it_at_once(make, tmp_path, monkeypatch):
    import time

    pids = stuck_child(tmp_path, monkeypatch)
    path = tmp_path / "big.log"
    path.write_bytes(b"[rank0]: step 12 | loss 0.25 | nothing to see here at all\n" * 50_000)
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_logs([str(path)])
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen))
        screen = app.screen
        await wait_until(pilot, lambda: "diagnosing" in str(screen.query_one("#status").render()),
                         what="progress", timeout=30)
        assert "1 MiB read" in str(screen.query_one("#status").render())
        await wait_until(pilot, lambda: pids.exists() and pids.read_text(), what="the child's pids")
        child, grandchild = map(int, pids.read_text().split())
        assert _alive(child) and _alive(grandchild)
        assert screen.diagnose_worker.state == WorkerState.RUNNING
        pressed = time.monotonic()
        await pilot.press("escape")
        await wait_until(pilot, lambda: screen.diagnose_worker.state == WorkerState.CANCELLED, what="cancelled",
                         timeout=10)
        await wait_until(pilot, lambda: not _alive(child) and not _alive(grandchild), what="the group killed",
                         timeout=10)
        assert time.monotonic() - pressed < 3  # not the child's 300 s
        assert screen.diagnosis is None
        assert "cancelled" in str(screen.query_one("#status").render())
        from gpudoctor.tui.messages import Progress

        screen.post_message(Progress("diagnosis", 2 << 20, 4 << 20))  # a report the worker posted before it stopped
        await pilot.pause()
        assert "cancelled" in str(screen.query_one("#status").render())
        assert isinstance(app.screen, LogScreen)  # the first esc cancels; the second goes back
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, LogScreen), what="back")


async def test_pasted_text_is_diagnosed(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, OpenScreen))
        await pilot.click("#--content-tab-tab-paste")
        await wait_until(pilot, lambda: app.screen.focused is app.screen.query_one("#open-text"), what="paste box")
        app.screen.query_one("#open-text").text = D8_LOG.read_text()
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None)
        screen = app.screen
        assert screen.diagnosis.findings[0].id == "D8"
        assert screen.current == "<pasted>"
        assert {ev.file for ev in screen.diagnosis.findings[0].evidence} == {"<pasted>"}


async def test_open_dialog_takes_a_typed_path(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, OpenScreen))
        field = app.screen.query_one("#open-path")
        field.value = str(D8_LOG)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None)
        assert app.screen.diagnosis.findings[0].id == "D8"


async def test_a_missing_file_is_one_line_not_a_crash(make, tmp_path):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_logs([str(tmp_path / "nope.log")])
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen))
        await wait_until(pilot, lambda: "nope.log" in str(
            app.screen.query_one("#status").render()), what="the error")
        assert app.screen.diagnosis is None
        assert os.path.basename(str(tmp_path / "nope.log")) in str(app.screen.query_one("#status").render())


async def test_a_gzipped_log_is_inflated_for_the_view(make, tmp_path):
    import gzip

    path = tmp_path / "job.log.gz"
    path.write_bytes(gzip.compress(D8_LOG.read_bytes()))
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_log(app, pilot, [path])
        log = screen.query_one(LogView)
        await wait_until(pilot, lambda: log.logfile is not None and log.logfile.complete, what="inflated")
        assert screen.diagnosis.findings[0].id == "D8"
        assert log.logfile.line_count == len(D8_LOG.read_text().splitlines())
        line = screen.diagnosis.findings[0].evidence[0].line
        assert log.logfile.lines(line - 1, 1)[0] == D8_LOG.read_text().splitlines()[line - 1]


async def test_a_log_without_failure_says_its_guesses_rest_on_content(make, tmp_path):
    log = tmp_path / "launch.log"
    log.write_text("- `Accelerate` default config:\n        - distributed_type: MULTI_GPU\n        - num_processes: 4\n"
                   "I started it with python train.py and only GPU 0 is busy\n")
    app = make()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_log(app, pilot, [log])
        assert screen.diagnosis.findings and all(f.tier == "possible" for f in screen.diagnosis.findings)
        assert "no failure line" in str(screen.query_one("#status").render())


async def test_a_script_given_with_the_log_confirms_the_cause_it_shows(make, tmp_path):
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "data" / "lint" / "buggy" / "d3_set_device_global_rank.py"
    log = tmp_path / "rank9.log"
    log.write_text("starting\nRuntimeError: CUDA error: invalid device ordinal\n")
    app = make(logs=[str(log)], script=str(script))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None,
                         what="the diagnosis")
        screen = app.screen
        top = screen.diagnosis.findings[0]
        assert (top.id, top.tier) == ("D3", "match")  # alone, the log only makes D3 a guess
        assert any(ev.file == str(script) for ev in top.evidence)
        log_view = screen.query_one(LogView)
        await wait_until(pilot, lambda: log_view.cursor == 2, what="the log's own evidence line")
        assert log_view.evidence == {2}  # the script's line numbers are not lit in the log
        await pilot.press("n")
        await pilot.pause(0.1)
        assert log_view.cursor == 2 and isinstance(app.screen, LogScreen)
        assert "confirmed by the script" in str(screen.query_one("#verdict").render())
        from textual.widgets import OptionList

        first = screen.query_one("#findings", OptionList).get_option_at_index(0)
        assert "confirmed by the script" in str(first.prompt)


async def test_the_witness_note_survives_an_80_column_terminal(make, tmp_path):
    """QA24 T2: at 80x24 the note came after the title, on a third wrapped line of the option, the first to go when
    the list is short of room; it now comes before the title, on the option's first line with the entry's id."""
    import re
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "data" / "lint" / "buggy" / "d3_set_device_global_rank.py"
    log = tmp_path / "rank9.log"
    log.write_text("starting\nRuntimeError: CUDA error: invalid device ordinal\n")
    app = make(logs=[str(log)], script=str(script))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None,
                         what="the diagnosis")
        await pilot.pause(0.2)
        import html

        svg = app.export_screenshot()
        rows = [html.unescape(t).replace("\xa0", " ") for t in re.findall(r"<text[^>]*>(.*?)</text>", svg)]
        shown = "".join(rows)
        assert "confirmed by the script" in shown
        assert shown.index("confirmed by the script") < shown.index("All processes land on GPU 0")


async def test_guesses_alone_say_what_would_confirm_them_and_a_script_given_silences_that(make, tmp_path):
    from pathlib import Path

    log = tmp_path / "rank9.log"
    log.write_text("starting\nRuntimeError: CUDA error: invalid device ordinal\n")  # D3 or D27: a guess
    app = make(logs=[str(log)])
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None,
                         what="the diagnosis")
        said = str(app.screen.query_one("#verdict").render())
        assert "Only guesses" in said and "--script" in said and "D27" in said, said
        assert str(app.screen.query_one("#status").render()).startswith("no match, 3 guesses")
    script = Path(__file__).resolve().parents[1] / "data" / "lint" / "correct" / "spawn_tutorial_local_rank.py"
    app = make(logs=[str(log)], script=str(script))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None,
                         what="the diagnosis")
        assert "Only guesses" not in str(app.screen.query_one("#verdict").render())


async def test_a_launch_command_given_with_the_log_confirms_the_rendezvous_cause(make, tmp_path):
    log = tmp_path / "node0.log"
    log.write_text("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. "
                   "1/2 clients joined.\n")
    app = make(logs=[str(log)], cmd="torchrun --standalone --nnodes=2 --nproc-per-node=8 train.py")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None,
                         what="the diagnosis")
        top = app.screen.diagnosis.findings[0]
        assert (top.id, top.tier) == ("D2", "match")
        assert any(ev.signature == "command:standalone-multinode" for ev in top.evidence)


async def test_a_log_gone_before_the_scan_is_named_not_reported_as_nothing_found(make, tmp_path, monkeypatch):
    # the file goes between the screen resolving it and the child reading it (log rotation, a cleaned /tmp)
    import sys

    from gpudoctor.tui import diagnose_child

    path = tmp_path / "rank0.log"
    path.write_text("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error\n")
    wrapper = tmp_path / "unlink_then_child.py"
    wrapper.write_text(f"import os, sys\nos.unlink({str(path)!r})\n"
                       "os.execv(sys.executable, [sys.executable, '-m', 'gpudoctor.tui.diagnose_child'])\n")
    monkeypatch.setattr(diagnose_child, "CHILD", [sys.executable, str(wrapper)])
    app = make()
    async with app.run_test(size=(100, 24)) as pilot:
        app.open_logs([str(path)])
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.diagnosis is not None,
                         what="the diagnosis")
        status = str(app.screen.query_one("#status").render())
        assert "no input could be read" in status and "rank0.log: no such file or directory" in status
        assert "nothing in the catalogue" not in status


async def test_quitting_during_a_stuck_diagnosis_leaves_no_process_behind(make, tmp_path, monkeypatch):
    import time

    pids = stuck_child(tmp_path, monkeypatch)
    path = tmp_path / "rank0.log"
    path.write_text("[rank0]: step 1 | loss 0.5\n")
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_logs([str(path)])
        await wait_until(pilot, lambda: pids.exists() and pids.read_text(), what="the child's pids")
        child, grandchild = map(int, pids.read_text().split())
        quit_at = time.monotonic()
        await pilot.press("ctrl+q")
    deadline = time.monotonic() + 10
    while (_alive(child) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child) and not _alive(grandchild)
    assert time.monotonic() - quit_at < 5


async def test_the_paste_tab_takes_typed_keys_when_reached_by_keyboard(make):
    """QA23 T1: shift+tab then right showed the paste box, but typed keys went nowhere until Tab was pressed."""
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: isinstance(app.screen, OpenScreen))
        await pilot.press("shift+tab")
        await pilot.press("right")
        box = app.screen.query_one("#open-text")
        await wait_until(pilot, lambda: app.screen.focused is box, what="paste box focused")
        await pilot.press(*"NCCL")
        assert box.text == "NCCL"
        assert "pasted" in str(app.screen.query_one("#open-hint").render())


async def test_a_run_folder_with_its_script_beside_the_logs_is_diagnosed(make, tmp_path):
    """QA25 Q12: the TUI took the note that train.py was left out for a fatal error: no findings, no log."""
    import shutil

    shutil.copy(D8_LOG, tmp_path / "rank0.log")
    (tmp_path / "train.py").write_text("import torch\n")
    app = make()
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_log(app, pilot, [tmp_path])
        assert screen.diagnosis.findings and screen.diagnosis.findings[0].id == "D8"
        await pilot.pause(0.2)
        assert any("train.py" in n.message for n in app._notifications)
