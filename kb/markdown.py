"""One entry as a Markdown document: the single text that `show`, `--markdown` and the TUI all render."""
from __future__ import annotations

from gpudoctor.kb.model import SECTION_TITLES, Entry


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line.strip() else line for line in text.splitlines())


def entry_to_markdown(entry: Entry, titles: dict[str, str] | None = None, *, links: bool = True) -> str:
    """Render an entry; `titles` maps related ids to their titles. `links=False` writes URLs as text."""
    titles = titles or {}
    section = SECTION_TITLES.get(entry.section, entry.section)
    where = "can show in a log" if entry.log_visibility == "shows" else "does not show in a log"
    origin = " · your runbook" if entry.origin == "user" else ""
    parts = [f"# {entry.id} · {entry.title}", "", f"*{section} · {where}{origin}*", "", entry.summary, ""]

    parts += ["## Symptoms", ""]
    parts += [f"- {s}" for s in entry.symptoms]
    parts += ["", "## Root cause", "", entry.cause, ""]

    parts += ["## Fix", ""]
    for n, step in enumerate(entry.fix, 1):
        parts.append(f"{n}. " + _indent(step.text, "   ").lstrip())
        if step.code:
            parts += ["", f"   ```{step.lang or ''}", _indent(step.code, "   "), "   ```"]
        parts.append("")

    if entry.log_visibility == "never":
        parts += ["## In the logs", "", entry.log_visibility_note, ""]
    elif entry.error_strings:
        parts += ["## What the logs say", ""]
        parts += [f"- `{s}`" if "`" not in s else f"- {s}" for s in entry.error_strings]
        parts.append("")

    if entry.probes:
        parts += ["## Confirm it", ""]
        parts += [f"- `gpudoctor probe {p}`" for p in entry.probes]
        parts.append("")
    if entry.fix_actions:
        parts += ["## Fix actions", ""]
        parts += [f"- `{a.id}` ({a.safety}): {a.title}" for a in entry.fix_actions]
        parts += ["", f"Preview with `gpudoctor fix {entry.id} --diff`.", ""]

    if entry.related:
        parts += ["## Related", ""]
        for rel in entry.related:
            title = titles.get(rel.id)
            name = f"**{rel.id}** {title}" if title else f"**{rel.id}**"
            parts.append(f"- {name}: {rel.why}")
        parts.append("")
    if entry.see_also:
        parts += ["## Outside this catalogue", ""]
        parts += [f"- *{p.topic}*: {p.note}" for p in entry.see_also]
        parts.append("")
    if entry.references:
        parts += ["## References", ""]
        for ref in entry.references:
            parts.append(f"- [{ref.title}]({ref.url})" if links else f"- {ref.title}: {ref.url}")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"
