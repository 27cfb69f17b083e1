"""Fix actions in the catalogue: the loader validates them by file and field; every named transform exists."""
from __future__ import annotations

import textwrap

import pytest

from gpudoctor.kb.catalog import BUILTIN_DIR, build_catalog, load_catalog
from gpudoctor.kb.model import FIX_TRANSFORMS

ENTRY = textwrap.dedent("""\
    id: X2
    title: Our cluster needs its own NIC setting
    section: user
    summary: NCCL picks the management port on our nodes.
    symptoms: [slow allreduce]
    cause: Two NICs.
    fix_summary: Pin the NIC.
    fix:
      - text: Pin it.
    log_visibility: never
    log_visibility_note: nothing in the log says which NIC
    fix_actions:
      - id: pin-nic
        kind: env
        safety: safe
        title: Pin the NIC
        env: {NCCL_SOCKET_IFNAME: "{interface}"}
        defaults: {interface: ens5}
    """)


def _problems(tmp_path, text):
    folder = tmp_path / "rb"
    folder.mkdir(exist_ok=True)
    (folder / "X2-nic.yaml").write_text(text)
    catalog = build_catalog([(BUILTIN_DIR, True), (folder, False)])
    return [p for p in catalog.problems if "X2-nic.yaml" in p], catalog


def test_a_good_action_loads_with_its_params(tmp_path):
    found, catalog = _problems(tmp_path, ENTRY)
    assert found == []
    action = catalog.get("X2").fix_actions[0]
    assert action.param("env") == (("NCCL_SOCKET_IFNAME", "{interface}"),)
    assert action.param("defaults") == (("interface", "ens5"),)


@pytest.mark.parametrize("old, new, where", [
    ("kind: env", "kind: shell", "fix_actions[0].kind: expected one of env, command, patch, config"),
    ("safety: safe", "safety: risky", "fix_actions[0].safety: expected one of"),
    ("safety: safe", "safety: unsafe", "fix_actions[0].why: an unsafe or display-only action must say why"),
    ('env: {NCCL_SOCKET_IFNAME: "{interface}"}', "env: {NCCL_SOCKET_IFNAME: '{iface}'}", "unknown fact {iface}"),
    ('env: {NCCL_SOCKET_IFNAME: "{interface}"}', "patch: set-epoch", "fix_actions[0].patch: not a field of a env action"),
    ("kind: env", "kind: patch", "fix_actions[0].env: not a field of a patch action"),
    ("defaults: {interface: ens5}", "defaults: {iface: ens5}", "fix_actions[0].defaults.iface: unknown fact"),
    ("defaults: {interface: ens5}", "command: ls", "fix_actions[0].command: unknown field"),
    ('env: {NCCL_SOCKET_IFNAME: "{interface}"}', "env: {1BAD: x}", "is not an environment variable name"),
])
def test_bad_actions_are_named_by_file_and_field(tmp_path, old, new, where):
    assert old in ENTRY
    found, catalog = _problems(tmp_path, ENTRY.replace(old, new))
    assert len(found) == 1 and where in found[0], found
    assert catalog.get("D22") is not None


def test_unknown_transform_names_are_rejected(tmp_path):
    text = ENTRY.replace('env: {NCCL_SOCKET_IFNAME: "{interface}"}', "rewrite: slurm").replace("kind: env", "kind: command")
    found, _ = _problems(tmp_path, text)
    assert "fix_actions[0].rewrite: unknown rewrite 'slurm'" in found[0]


def test_every_transform_the_catalogue_may_name_is_implemented():
    from gpudoctor.engine.fixes.config import CONFIG_EDITS
    from gpudoctor.engine.fixes.launch import _REWRITES
    from gpudoctor.engine.fixes.patches import PATCHES, get

    assert set(FIX_TRANSFORMS["command"]) == set(_REWRITES)
    assert set(FIX_TRANSFORMS["patch"]) == set(PATCHES)
    assert set(FIX_TRANSFORMS["config"]) == set(CONFIG_EDITS)
    assert all(callable(get(name)) for name in PATCHES)


def test_the_entries_the_issue_names_have_their_fixes():
    catalog = load_catalog(use_cache=False)
    kinds = {e.id: {(a.kind, a.safety) for a in e.fix_actions} for e in catalog}
    for entry_id in ("D1", "D2", "D4", "D5", "D6"):
        assert ("command", "safe") in kinds[entry_id]
    for entry_id in ("D3", "D21", "D22", "D23", "MN3", "MN5"):
        assert ("patch", "safe") in kinds[entry_id]
    assert ("patch", "unsafe") in kinds["D8"] and ("patch", "display-only") in kinds["P1"]
    assert ("env", "safe") in kinds["MN2"] and ("env", "safe") in kinds["MN3"]
    assert ("config", "safe") in kinds["D17"] and ("config", "safe") in kinds["D18"] and ("config", "safe") in kinds["D5"]


def test_importing_the_fix_modules_loads_neither_torch_nor_textual_nor_libcst():
    import subprocess
    import sys

    code = ("import sys, gpudoctor.engine.fixes, gpudoctor.engine.fixes.apply, gpudoctor.commands.fix; "
            "print(sorted(m for m in ('torch', 'textual', 'libcst') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
