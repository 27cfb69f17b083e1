"""D4: a script that sets MASTER_PORT to a fixed number itself.

Every job that runs the script binds the same port, so a second job on the node stops with "Address already in use";
under torchrun the assignment also replaces the port the launcher chose. `os.environ.setdefault` keeps the number as a
default and lets each job (or the launcher) give its own.
"""
from __future__ import annotations

import ast
import re

from gpudoctor.engine.lint.model import Check, Hit
from gpudoctor.engine.lint.script import dotted

PORT_VARS = ("MASTER_PORT",)


def fixed_port_assignments(script) -> list[ast.Assign]:
    """`os.environ["MASTER_PORT"] = "29500"` (a literal, str() of one, or a name only ever bound to one) anywhere in
    the file, unless a test of MASTER_PORT guards it."""
    names = _literal_names(script)
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
        if _literal_port(node.value, names):
            out.append(node)
    return _unguarded(script, out)


def fixed_port_updates(script) -> list[ast.Call]:
    """`os.environ.update(MASTER_PORT="29500")` or `os.environ.update({"MASTER_PORT": "29500", ...})`."""
    names = _literal_names(script)
    out = []
    for node in script.index.of(ast.Call):
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "update"
                and script.resolve(dotted(func.value)) == "os.environ"):
            continue
        if update_port_value(node, names) is not None:
            out.append(node)
    return _unguarded(script, out)


def update_port_value(call: ast.Call, names: dict | None = None) -> ast.AST | None:
    """The literal port an `os.environ.update(...)` call sets, or None."""
    names = names or {}
    for kw in call.keywords:
        if kw.arg in PORT_VARS and _literal_port(kw.value, names):
            return kw.value
    for arg in call.args[:1]:
        if isinstance(arg, ast.Dict):
            for key, value in zip(arg.keys, arg.values):
                if isinstance(key, ast.Constant) and key.value in PORT_VARS and _literal_port(value, names):
                    return value
    return None


_TCP_PORT = re.compile(r"^tcp://[^/\s]*:(\d{2,5})$")


def fixed_init_method_ports(script) -> list[tuple[ast.keyword, str]]:
    """`init_process_group(..., init_method="tcp://10.1.1.20:23456")`: a rendezvous port written into the call."""
    out = []
    for node in script.index.of(ast.Call):
        if not (dotted(node.func) or "").endswith("init_process_group"):
            continue
        for kw in node.keywords:
            if kw.arg != "init_method":
                continue
            text = _joined_text(kw.value)
            match = _TCP_PORT.match(text) if text else None
            if match:
                out.append((kw, match.group(1)))
    return out


def _joined_text(value: ast.AST) -> str | None:
    """A string constant, or an f-string with its holes as `{}` (a host from a variable, a port written out)."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in value.values)
    return None


def _literal_names(script) -> dict[str, ast.Constant]:
    """Names the file binds only ever to one number (`PORT = 12355`): the value a `str(PORT)` stands for."""
    seen: dict[str, ast.AST | None] = {}
    for node in script.index.of(ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Name):
                ok = isinstance(node.value, ast.Constant) and str(node.value.value).isdigit()
                earlier = seen.get(target.id, node.value if ok else None)
                same = ok and earlier is not None and ast.dump(earlier) == ast.dump(node.value)
                seen[target.id] = node.value if same else None
    return {name: value for name, value in seen.items() if value is not None}


def _unguarded(script, out: list) -> list:
    if not out:
        return out
    # an assignment under `if "MASTER_PORT" not in os.environ:` (or `if not os.environ.get("MASTER_PORT")`) is a
    # default already
    guarded = [range(n.body[0].lineno, (n.body[-1].end_lineno or n.body[-1].lineno) + 1)
               for n in ast.walk(script.tree) if isinstance(n, ast.If) and any(v in ast.unparse(n.test) for v in PORT_VARS)]
    return [node for node in out if not any(node.lineno in span for span in guarded)]


def _shown(value: ast.AST) -> str:
    """A port value as the message shows it: a string in double quotes, anything else as written."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return f'"{value.value}"'
    return ast.unparse(value)


def _literal_port(value: ast.AST, names: dict | None = None) -> bool:
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "str" and value.args:
        value = value.args[0]
    if isinstance(value, ast.Name) and names and value.id in names:
        value = names[value.id]
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
        for node in fixed_port_updates(script):
            port = _shown(update_port_value(node, _literal_names(script)))
            yield Hit(node.lineno, node.col_offset,
                      f"os.environ.update() fixes MASTER_PORT at {port}: a second job on this node stops with "
                      f"'Address already in use'; set it with os.environ.setdefault(\"MASTER_PORT\", {port}) instead")
        for kw, port in fixed_init_method_ports(script):
            yield Hit(kw.value.lineno, kw.value.col_offset,
                      f"init_method fixes the rendezvous port at {port}: a second job on this node stops with "
                      f"'Address already in use'; take the port from MASTER_PORT (init_method=\"env://\", or "
                      f"os.environ.get(\"MASTER_PORT\", \"{port}\") in the URL)")
