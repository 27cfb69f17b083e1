"""`gpudoctor diagnose` through real pipes and files: exit codes, formats, bad input, terminal safety."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
PORT = (b"torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
        b"address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n")


def test_stdin_pipe_names_the_cause(cli_proc):
    r = cli_proc("diagnose", input=b"starting\n" + PORT)
    assert r.code == 0, r.err
    assert "D4" in r.out
    assert "line 2" in r.out  # one input: evidence is located by line number alone
    assert "Traceback" not in r.err


def test_a_collectors_timestamp_is_left_out_of_shown_evidence_and_kept_in_json(cli_proc):
    stamp = b"2024-05-01T12:34:56.123456789Z "
    log = stamp + b"starting\n" + stamp + PORT
    r = cli_proc("diagnose", "-", input=log)
    assert r.code == 0 and "D4" in r.out
    evidence = next(line for line in r.out.splitlines() if "line 2" in line)
    assert "2024-05-01T12" not in evidence and "DistNetworkError" in evidence  # 31 columns of 80 spared
    doc = json.loads(cli_proc("diagnose", "-", "--json", input=log).out)
    assert doc["findings"][0]["evidence"][0]["text"].startswith("2024-05-01T12:34:56")  # the line as it is


def test_a_context_line_that_is_all_prefix_is_not_shown_as_evidence(cli_proc):
    """QA24 R6: torchrun's empty banner line (its logger path says torch.distributed) was shown as evidence."""
    log = (b"W1129 00:56:16.532000 8452 torch/distributed/run.py:874] \n"
           b"E1129 00:56:18.696000 8452 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
           b"(exitcode: -9) local_rank: 1 (pid: 8483) of binary: /usr/bin/python\n")
    doc = json.loads(cli_proc("diagnose", "-", "--json", input=log).out)
    top = doc["findings"][0]
    assert top["id"] == "D28" and top["tier"] == "match"
    assert [e["line"] for e in top["evidence"]] == [2]


def test_dash_reads_stdin_and_json_follows_the_schema(cli_proc):
    r = cli_proc("diagnose", "-", "--json", input=PORT)
    assert r.code == 0
    doc = json.loads(r.out)
    assert doc["schema"] == "gpudoctor.diagnosis/2"
    top = doc["findings"][0]
    assert top["id"] == "D4" and 0 < top["score"] <= 1 and top["tier"] == "match"
    assert top["evidence"][0] == {"file": "<stdin>", "line": 1, "text": PORT.decode().rstrip("\n"),
                                  "signature": top["evidence"][0]["signature"]}
    assert top["fix"] and isinstance(top["probes"], list)
    assert isinstance(doc["ranks"], list)


def test_only_possible_causes_exit_1(cli_proc):
    r = cli_proc("diagnose", input=b"starting\nMismatched collective detected\n")
    assert r.code == 1
    assert r.out.startswith("No known cause matched") and "no signature fired" in r.out


def test_top_limits_each_tier(cli_proc):
    line = b"RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3\n"
    wide = json.loads(cli_proc("diagnose", "--json", "--top", "5", input=line).out)
    assert len(wide["findings"]) > 1 and {f["tier"] for f in wide["findings"]} == {"possible"}
    doc = json.loads(cli_proc("diagnose", "--json", "--top", "1", input=line).out)
    assert [f["id"] for f in doc["findings"]] == [wide["findings"][0]["id"]]


def test_nothing_known_exits_1_and_says_so(cli_proc):
    r = cli_proc("diagnose", input=b"ModuleNotFoundError: No module named 'transformers'\n")
    assert r.code == 1
    assert "Nothing in the catalogue explains this log" in r.out
    r = cli_proc("diagnose", "--json", input=b"all good\n")
    assert r.code == 1 and json.loads(r.out)["findings"] == []


@pytest.mark.parametrize("argv, message", [
    (["diagnose", "/no/such/file.log"], "/no/such/file.log: no such file or directory"),
    (["diagnose", "--top", "0", "-"], "--top must be at least 1"),
])
def test_bad_input_is_a_clear_error(cli_proc, argv, message):
    r = cli_proc(*argv, input=b"x\n")
    assert r.code == 2
    assert message in r.err
    assert "Traceback" not in r.err


def test_one_unreadable_input_is_said_once_and_several_are_each_named(cli_proc):
    r = cli_proc("diagnose", "/no/such/file.log")
    assert r.code == 2 and r.err.count("/no/such/file.log") == 1, r.err
    r = cli_proc("diagnose", "/no/such/a.log", "/no/such/b.log")
    assert r.code == 2 and "none of the 2 inputs could be read" in r.err
    assert "/no/such/a.log" in r.err and "/no/such/b.log" in r.err


def test_empty_stdin_is_an_input_error(cli_proc):
    r = cli_proc("diagnose", input=b"")
    assert r.code == 2 and "stdin was empty" in r.err


def test_corrupt_gzip_names_the_file(cli_proc, tmp_path):
    bad = tmp_path / "job.log.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    r = cli_proc("diagnose", str(bad))
    assert r.code == 2 and str(bad) in r.err and "Traceback" not in r.err


def test_truncated_gzip_keeps_what_it_read_and_says_so(cli_proc, tmp_path):
    data = gzip.compress(b"noise\n" * 2000 + PORT + b"more noise\n" * 5000)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[: len(data) - 40])  # the port error is early: it was read before the cut
    r = cli_proc("diagnose", str(path))
    assert r.code == 0, r.err
    assert "D4" in r.out
    assert str(path) in r.err and "ends early" in r.err and "Traceback" not in r.err


def test_binary_junk_and_control_characters_never_reach_the_terminal(cli_proc):
    junk = bytes(range(256)) * 4 + b"\n\x1b]0;pwned\x07\x1b[2J\x07\x08" + PORT
    r = cli_proc("diagnose", input=junk, env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert r.code == 0
    assert "\x1b" not in r.out and "\x07" not in r.out and "\x08" not in r.out
    assert "\\x07\\x08torch.distributed.DistNetworkError" in r.out  # shown, escaped
    doc = cli_proc("diagnose", "--json", input=junk)
    assert "\\u001b" not in doc.out and "\\u0007" not in doc.out


def test_no_color_means_no_escape_codes_and_color_forces_them(cli_proc):
    plain = cli_proc("diagnose", input=PORT, env={"NO_COLOR": "1"})
    assert "\x1b[" not in plain.out
    forced = cli_proc("diagnose", "--color", input=PORT)
    assert "\x1b[" in forced.out


def test_markdown_redacts_secrets(cli_proc):
    log = PORT + b"HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456 WANDB_API_KEY=0123456789abcdef0123\n" \
                 b"export NCCL_SOCKET_IFNAME=eth0 password: hunter2hunter2\n"
    r = cli_proc("diagnose", "--format", "markdown", input=log)
    assert r.code == 0
    assert "## gpudoctor diagnosis" in r.out
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in r.out


def test_output_fits_80_columns(cli_proc):
    r = cli_proc("diagnose", str(LOGS / "D4"), env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert r.code == 0
    assert max(len(line) for line in r.out.splitlines()) <= 80


def test_help_documents_exit_codes(cli_proc):
    r = cli_proc("diagnose", "--help")
    assert r.code == 0 and "exit codes" in r.out


def test_probe_flag_runs_the_port_probe_against_the_port_the_log_names(cli_proc):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        log = (f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
               f"address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n")
        r = cli_proc("diagnose", "--probe", "--json", input=log.encode(), timeout=120)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    verdicts = doc["findings"][0]["probe_results"]
    assert verdicts[0]["probe"] == "port"
    assert verdicts[0]["status"] == "confirmed"
    assert str(port) in verdicts[0]["summary"]


FLIGHT = Path(__file__).resolve().parents[1] / "data" / "flight"


@pytest.mark.parametrize("case, needle", [
    ("missing_rank", "never by 2"),
    ("size_mismatch", "input_sizes differ"),
    ("dtype_mismatch", "input_dtypes differ"),
    ("op_mismatch", "differ"),
])
def test_flight_recorder_dumps_name_the_desync(cli_proc, case, needle):
    r = cli_proc("diagnose", str(FLIGHT / case / "json"), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    top = doc["findings"][0]
    assert top["id"] == "D19"
    assert any(needle in ev["text"] and ev["line"] == 0 for ev in top["evidence"])
    assert doc["flight"]["healthy"] is False


def test_healthy_flight_dumps_name_nothing(cli_proc):
    r = cli_proc("diagnose", str(FLIGHT / "healthy" / "json"))
    assert r.code == 1 and "agree on every recorded collective" in r.out


def test_pickled_dumps_read_the_same_as_json(cli_proc):
    pickled = json.loads(cli_proc("diagnose", str(FLIGHT / "missing_rank" / "nccl_trace_rank_0"),
                                  str(FLIGHT / "missing_rank" / "nccl_trace_rank_1"),
                                  str(FLIGHT / "missing_rank" / "nccl_trace_rank_2"),
                                  str(FLIGHT / "missing_rank" / "nccl_trace_rank_3"), "--json").out)
    assert pickled["findings"][0]["id"] == "D19"


@pytest.mark.parametrize("secret, kept", [
    ("--password hunter2", "--password <redacted>"),
    ("--api-key 8f3a9c2b7d1e4f60a5b3c9d8e7f6a1b2", "--api-key <redacted>"),
    ("--wandb_key 0123456789abcdef0123456789abcdef01234567", "--wandb_key <redacted>"),
    ("export DB_PASS=hunter6", "export DB_PASS=<redacted>"),
    ("--token abc123secretvalue", "--token <redacted>"),
    ("--password=hunter3", "--password=<redacted>"),
])
def test_markdown_redacts_every_spelling_of_a_secret(cli_proc, secret, kept):
    log = PORT.rstrip(b"\n") + f" {secret} --nproc-per-node 8 passes=3\n".encode()
    r = cli_proc("diagnose", "--format", "markdown", input=log)
    assert kept in r.out and secret.split("=")[-1].split()[-1] not in r.out, r.out
    assert "--nproc-per-node 8 passes=3" in r.out  # ordinary flags and words stay


def test_a_named_pipe_in_a_log_folder_is_skipped_not_waited_on(cli_proc, tmp_path):
    import os

    (tmp_path / "rank0.log").write_bytes(PORT)
    os.mkfifo(tmp_path / "tee.pipe")  # nothing ever writes to it: opening it would block for ever
    r = cli_proc("diagnose", str(tmp_path), env={"NO_COLOR": "1"})
    assert r.code == 0 and "D4" in r.out
    assert "tee.pipe: skipped, not a regular file" in r.err


def test_a_healthy_probe_does_not_claim_to_rule_out_the_failure_the_log_shows(cli_proc):
    # the example's rank 2 ran out of memory (D20); a fast all_reduce here now says nothing against that
    r = cli_proc("diagnose", "--probe", str(Path(__file__).resolve().parents[2] / "examples" / "rank-crash-then-timeout"),
                 env={"NO_COLOR": "1", "COLUMNS": "80"}, timeout=180)
    assert r.code == 0 and "D20" in r.out, r.err
    block = r.out.split(" D20 ", 1)[1].split("more: gpudoctor show D20", 1)[0]
    assert "probe collectives: nothing found now" in block and "ruled out" not in block


def test_a_file_named_twice_is_read_once(cli_proc, tmp_path):
    import os

    log = tmp_path / "rank0.log"
    log.write_bytes(PORT)
    os.symlink(log, tmp_path / "link.log")
    once = cli_proc("diagnose", "--json", str(log))
    again = cli_proc("diagnose", "--json", str(tmp_path), str(log), str(log), str(tmp_path / "link.log"))
    assert len(json.loads(again.out)["inputs"]) == 1 == len(json.loads(once.out)["inputs"])


def test_frames_of_a_cut_traceback_are_shown_as_gpudoctors_reading_not_as_a_log_line(cli_proc, tmp_path):
    log = tmp_path / "cut.log"
    log.write_text('Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    main()\n'
                   '  File "/x/torch/nn/parallel/distributed.py", line 1, in forward\n'
                   '    output = self._run_ddp_forward(*inputs, **kwargs)\n', encoding="utf-8")
    js = json.loads(cli_proc("diagnose", "--json", str(log)).out)
    kinds = {e["signature"] for f in js["findings"] for e in f["evidence"]}
    assert "cut-traceback" in kinds and "failure-line" not in kinds, kinds
    text = cli_proc("diagnose", str(log), env={"NO_COLOR": "1", "COLUMNS": "80"}).out
    assert "frames of the traceback at line 1:" in text and "line 1  " not in text


def test_log_text_in_markdown_outside_code_blocks_renders_as_text_not_html_or_links(cli_proc):
    """A report pasted into an issue: a log line that holds a tag, a link or a fence stays words in the ranks table and
    the "Which rank?" list (the evidence is fenced already)."""
    from markdown_it import MarkdownIt

    evil = ("[rank0]: step | 3 | loss\n[rank0]: RuntimeError: Address already in use | col ``` </details>"
            "<script>alert(1)</script> [x](javascript:alert(1)) <img src=x onerror=alert(1)>\n").encode()
    md = cli_proc("diagnose", "--format", "markdown", input=evil).out
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    kinds = {t.type for t in tokens} | {c.type for t in tokens for c in (t.children or [])}
    assert "table_open" in kinds and not kinds & {"html_inline", "html_block", "link_open", "image"}, kinds
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html


def test_per_node_folders_whose_files_are_named_by_local_rank_keep_each_ranks_own_lines(cli_proc, tmp_path):
    """QA24 R1: node0/rank0.log and node1/rank0.log (local ranks) were merged into one rank 0 that showed rank 2's OOM,
    and the table's labels (rank0.log:16 twice) could not be read back to a file."""
    example = Path(__file__).resolve().parents[2] / "examples" / "rank-crash-then-timeout"
    for node, ranks in (("node0", (0, 1)), ("node1", (2, 3))):
        (tmp_path / "mn" / node).mkdir(parents=True)
        for local, rank in enumerate(ranks):
            (tmp_path / "mn" / node / f"rank{local}.log").write_bytes((example / f"rank{rank}.log").read_bytes())
    doc = json.loads(cli_proc("diagnose", str(tmp_path / "mn"), "--json").out)
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    assert sorted(by_rank) == [0, 1, 2, 3]
    assert by_rank[2]["status"] == "died" and by_rank[0]["status"] == "ok"
    assert [s.rsplit("/", 2)[-2:] for s in by_rank[2]["sources"]] == [["node1", "rank0.log"]]
    text = cli_proc("diagnose", str(tmp_path / "mn"), env={"COLUMNS": "80"}).out
    row = next(line for line in text.splitlines() if line.startswith("  2 "))
    assert "node1/rank0.log:16" in row


@pytest.mark.parametrize("run", ["store-wrong-port", "store-wrong-address"])
def test_ranks_given_different_store_endpoints_never_meet_d2_not_a_crash(cli_proc, run):
    """QA24 R16: a rank started with a typo'd MASTER_PORT (or MASTER_ADDR) read as a confident D20, "one rank failed
    (OOM, NaN, CUDA error)", citing a C++ `frame #1: c10::DistError::DistError(...)` line as the rank's error."""
    folder = Path(__file__).resolve().parents[1] / "data" / "runs" / run
    doc = json.loads(cli_proc("diagnose", str(folder), "--json").out)
    assert [(f["id"], f["tier"]) for f in doc["findings"]][:1] == [("D2", "match")]
    assert "D20" not in [f["id"] for f in doc["findings"]]
    for rank in doc["ranks"]:
        assert rank["status"] != "died"
        assert not (rank.get("first_error") or {}).get("text", "").startswith("frame #")


def test_a_run_folders_code_and_checkpoints_are_left_out_of_a_folder_walk(cli_proc, tmp_path):
    """QA24 R14: `diagnose RUN_DIR/` read train.py's comment as a confident D4 on a run that had finished, and unpacked
    a torch.save checkpoint (a zip) as an archive of logs. Named on the command line, a file is still read."""
    run = tmp_path / "run"
    (run / "code").mkdir(parents=True)
    (run / "train.log").write_text("epoch 1 step 50 loss 0.41\nepoch 2 step 100 loss 0.33\n"
                                   "training complete, saved checkpoint to final.pt\n")
    (run / "code" / "train.py").write_text('# if the port is taken we get "RuntimeError: Address already in use"\n')
    import zipfile

    with zipfile.ZipFile(run / "final.pt", "w") as z:
        z.writestr("final/data.pkl", b"\x80\x02}q\x00." + b"\x00" * 64)
    r = cli_proc("diagnose", str(run), "--json")
    doc = json.loads(r.out)
    assert [f for f in doc["findings"] if f["tier"] == "match"] == [] and r.code == 1
    assert [i["name"].rsplit("/", 1)[-1] for i in doc["inputs"]] == ["train.log"]
    assert "left out 2 files that hold code, checkpoints or images" in r.err
    named = json.loads(cli_proc("diagnose", str(run / "code" / "train.py"), "--json").out)
    assert named["findings"] and named["findings"][0]["id"] == "D4"


def test_two_processes_started_as_rank_0_read_d1_not_a_second_job(cli_proc):
    """QA24 R17: the process meant as rank 1 could not bind the port rank 0's store holds: a 0.99 D4 "second job",
    whose fix (another port) would split the job. One log with EADDRINUSE alone stays D4."""
    folder = Path(__file__).resolve().parents[1] / "data" / "runs" / "duplicate-rank-zero"
    doc = json.loads(cli_proc("diagnose", str(folder), "--json").out)
    assert [(f["id"], f["tier"]) for f in doc["findings"]][:1] == [("D1", "match")]
    assert "D4" not in [f["id"] for f in doc["findings"]]
    alone = json.loads(cli_proc("diagnose", str(folder / "rank1.log"), "--json").out)
    assert alone["findings"][0]["id"] == "D4"


def test_a_hang_stopped_with_ctrl_c_is_no_host_oom(cli_proc):
    """QA24 R12: torchrun's own SIGKILL after a Ctrl-C ("Unable to shutdown process ... via 2, forcefully exiting via
    9") was read as the host's OOM killer, D28 first."""
    log = Path(__file__).resolve().parents[1] / "data" / "runs" / "ctrl-c-on-a-hang.log"
    r = cli_proc("diagnose", str(log), "--json")
    doc = json.loads(r.out)
    assert "D28" not in [f["id"] for f in doc["findings"]]
    assert any("stopped by hand" in note for note in doc["notes"])


@pytest.mark.parametrize("name, error", [("spawn-rank-raised.log", "ValueError: bad batch shape"),
                                         ("spawn-rank-killed.log", "terminated with signal SIGKILL")])
def test_a_rank_that_died_under_mp_spawn_is_named(cli_proc, name, error):
    """QA24 R8: mp.spawn prints the worker's traceback under "-- Process 1 terminated with the following error:" (or
    "process 1 terminated with signal SIGKILL"), with no rank prefix: the rank table was empty."""
    log = Path(__file__).resolve().parents[1] / "data" / "runs" / name
    doc = json.loads(cli_proc("diagnose", str(log), "--json").out)
    died = [r for r in doc["ranks"] if r["status"] == "died"]
    assert [r["rank"] for r in died] == [1], doc["ranks"]
    assert error in died[0]["first_error"]["text"]


def test_a_hang_stopped_with_ctrl_c_gets_no_guess_from_the_launchers_own_lines(cli_proc):
    """QA24 R12, the rest: torchrun's reaction to Ctrl-C (its SIGINT to the workers, the SIGKILL it escalates to, its
    SignalException) was read as failure lines, and the launch banner as content: D6, D1 and MN6 were guessed."""
    log = Path(__file__).resolve().parents[1] / "data" / "runs" / "ctrl-c-on-a-hang.log"
    r = cli_proc("diagnose", str(log), "--json")
    doc = json.loads(r.out)
    assert doc["findings"] == []
    assert any("gpudoctor stacks" in note for note in doc["notes"])


def test_a_script_that_does_not_parse_leaves_the_logs_diagnosis_standing(cli_proc, tmp_path):
    """QA25 Q17: a --script only a newer Python parses (a 3.12 `type` alias) threw the whole diagnosis away (exit 2,
    nothing on stdout) right after a warning that said the script was skipped."""
    log = Path(__file__).resolve().parents[1] / "data" / "runs" / "nan-skip-on-one-rank.log"
    script = tmp_path / "train.py"
    script.write_text("import torch\ntype Batch = list[int]\n")
    r = cli_proc("diagnose", str(log), "--script", str(script), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["findings"][0]["id"] == "D20" and "fix" not in doc
    assert "no fix planned for D20" in r.err and "train.py" in r.err


def test_torchruns_failure_summary_is_no_failure_line_beside_the_ranks_own_error(cli_proc):
    """QA25 Q3: a plain ModuleNotFoundError under torchrun was guessed D1, D3 and D28 from the launcher's echo of it
    ("failed (exitcode: 1) local_rank: 0", ChildFailedError, "exitcode : 1 (pid: ...)"), never from the error."""
    log = Path(__file__).resolve().parents[1] / "data" / "runs" / "import-error-under-torchrun.log"
    r = cli_proc("diagnose", str(log), "--json")
    assert r.code == 1
    assert json.loads(r.out)["findings"] == []


@pytest.mark.parametrize("tail", [
    "[2025-11-28 09:30:32,004] [INFO] [launch.py:351:main] Process 4411 exits successfully.\n",
    "{'train_runtime': 1822.11, 'train_samples_per_second': 35.1, 'train_loss': 1.93, 'epoch': 1.0}\n",
    "`Trainer.fit` stopped: `max_epochs=3` reached.\n",
])
def test_a_run_that_says_it_finished_gets_no_guesses(cli_proc, tmp_path, tail):
    """QA25 Q9: a DeepSpeed + HF Trainer run that exits successfully was guessed D18, D17, D11 from its config echo."""
    log = tmp_path / "run.log"
    log.write_text("[2025-11-28 09:00:09,871] [INFO] [config.py:1001:print]   zero_optimization_stage ...... 2\n"
                   "[2025-11-28 09:00:09,871] [INFO] [config.py:1001:print]   train_batch_size ............. 64\n"
                   "{'loss': 1.7122, 'grad_norm': 0.9021, 'learning_rate': 4.0e-05, 'epoch': 1.0}\n" + tail)
    r = cli_proc("diagnose", str(log), "--json")
    doc = json.loads(r.out)
    assert r.code == 1 and doc["findings"] == []
    assert any("the run finished" in note for note in doc["notes"])


def test_torchruns_banner_is_no_reason_to_guess_an_accelerate_entry(cli_proc):
    log = Path(__file__).resolve().parents[1] / "data" / "runs" / "clean-torchrun-run.log"
    doc = json.loads(cli_proc("diagnose", str(log), "--json").out)
    assert all(f["tier"] == "possible" for f in doc["findings"])
    assert "D5" not in [f["id"] for f in doc["findings"]]
