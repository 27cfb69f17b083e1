"""Live stack dumps of a hang (`gpudoctor stacks`, py-spy): a DDP rank stopped in backward waits in the gradient
all-reduce (QA23 S1), and the ranks table shows where the user's own code stopped, not the dump's `<module>` line."""
from __future__ import annotations

from rule_helpers import matches, run

# py-spy 0.3 of torchrun's two ranks (QA23 S1: `if rank != 0: dist.barrier()` after each epoch; rank 0 went on into
# the next step's backward, whose DDP gradient all-reduce rank 1 never joins)
RANK0 = """Process 4595: /opt/venv/bin/python3 -u train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4595 (idle): "MainThread"
    _engine_run_backward (torch/autograd/graph.py:979)
    backward (torch/autograd/__init__.py:395)
    Tensor.backward (torch/_tensor.py:623)
    main (train.py:29)
    <module> (train.py:38)
"""
RANK1 = """Process 4596: /opt/venv/bin/python3 -u train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4596 (idle): "MainThread"
    barrier (torch/distributed/distributed_c10d.py:5356)
    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
    main (train.py:32)
    <module> (train.py:38)
"""


def test_a_rank_in_backward_and_one_in_a_barrier_are_in_different_collectives(tmp_path):
    from gpudoctor.engine.diagnose import diagnose
    from gpudoctor.engine.sources import resolve
    from gpudoctor.kb.catalog import load_catalog

    (tmp_path / "rank0.py-spy.txt").write_text(RANK0)
    (tmp_path / "rank1.py-spy.txt").write_text(RANK1)
    d = diagnose(load_catalog(use_cache=False), resolve([str(tmp_path)]))
    assert [f.id for f in d.findings if f.tier == "match"][:1] == ["D19"]
    texts = " ".join(ev.text for ev in d.findings[0].evidence)
    assert "rank 0 stopped in backward (DDP's gradient all_reduce)" in texts and "rank 1 stopped in barrier" in texts
    shown = {r.rank: r.last_line.text for r in d.ranks}
    assert shown == {0: "main (train.py:29)", 1: "main (train.py:32)"}
    assert {r.rank: r.last_line.line for r in d.ranks} == {0: 8, 1: 7}  # the dump's own line of that frame


def test_every_rank_in_backward_is_no_desync(catalog):
    assert "D19" not in matches(run(catalog, RANK0 + RANK0.replace("4595", "4597")))
