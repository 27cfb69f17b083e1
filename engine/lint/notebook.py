"""A Jupyter notebook read as the script its code cells make: each cell's lines in order, IPython's magics and shell
escapes (`%time`, `!pip install`) kept as comments so that every line keeps its number, and a map from each line of
that script back to its cell and the line within the cell, for the findings."""
from __future__ import annotations

import json

NOTEBOOK_SUFFIX = ".ipynb"


class NotANotebook(ValueError):
    """The file is not nbformat JSON (a notebook with its own problem), with the reason in one line."""


def notebook_script(raw: bytes) -> tuple[str, list[tuple[int, int]]]:
    """(the script, for each of its lines (cell number from 1, line within the cell from 1))."""
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotANotebook(f"not a readable notebook (JSON): {str(exc).splitlines()[0]}") from None
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        raise NotANotebook("not a notebook: no list of cells (nbformat 4)")
    lines: list[str] = []
    where: list[tuple[int, int]] = []
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        for k, line in enumerate(text.split("\n"), 1):
            stripped = line.lstrip()
            if stripped.startswith(("%", "!")):  # IPython, not Python: kept as a comment, the numbering kept
                line = line[: len(line) - len(stripped)] + "# " + stripped
            lines.append(line)
            where.append((number, k))
        lines.append("")
        where.append((number, 0))
    return "\n".join(lines) + "\n", where
