"""D4: a script that sets MASTER_PORT to a fixed number itself.

Every job that runs the script binds the same port, so a second job on the node stops with "Address already in use";
under torchrun the assignment also replaces the port the launcher chose. `os.environ.setdefault` keeps the number as a
default and lets each job (or the launcher) give its own.
"""
from __future__ import annotations

import ast

from gpudoctor.engine.lint.model import Check, Hit
from gpudoctor.engine.lint.script import dotted

PORT_VARS = ("MASTER_PORT",)


def fixed_port_assignments(script) -> list[ast.Assign]:
    """`os.environ["MASTER_PORT"] = "29500"` (a literal, or str() of one) anywhere in the file, unless a test of
    MASTER_PORT guards it."""
    out = []
    for node in script.index.of(ast.Assign):
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Subscript):
            continue
        target = node.targets[0]
        key = target.slice
        if not (isinstance(key, ast.Constant) and key.value in PORT_VARS):
            continue
        if script.resolve(dotted(target.value)) != "os.environ":
            continue
        if _literal_port(node.value):
            out.append(node)
    if not out:
        return out
    # an assignment under `if "MASTER_PORT" not in os.environ:` (or `if not os.environ.get("MASTER_PORT")`) is a
    # default already
    guarded = [range(n.body[0].lineno, (n.body[-1].end_lineno or n.body[-1].lineno) + 1)
               for n in ast.walk(script.tree) if isinstance(n, ast.If) and any(v in ast.unparse(n.test) for v in PORT_VARS)]
    return [node for node in out if not any(node.lineno in span for span in guarded)]


def _literal_port(value: ast.AST) -> bool:
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "str" and value.args:
        value = value.args[0]
    return isinstance(value, ast.Constant) and str(value.value).isdigit()


class FixedMasterPort(Check):
    code = "D4"
    slug = "fixed-master-port"
    severity = "warning"
    summary = "MASTER_PORT set to a fixed number in the script: a second job on the node fails to bind it"

    def find(self, script):
        for node in fixed_port_assignments(script):
            port = ast.unparse(node.value)
            yield Hit(node.lineno, node.col_offset,
                      f"MASTER_PORT is fixed at {port}: a second job on this node stops with 'Address already in use', "
                      f"and under torchrun it replaces the launcher's port; use "
                      f"os.environ.setdefault(\"MASTER_PORT\", {port}) so each job can give its own")
