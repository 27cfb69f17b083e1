"""One entry as a Markdown document: the single text that `show`, `--markdown` and the TUI all render."""
from __future__ import annotations

from gpudoctor.kb.model import SECTION_TITLES, Entry


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line.strip() else line for line in text.splitlines())


def _section(title: str, items: list[str]) -> list[str]:
    """A heading and a bullet list, or nothing when there are no items."""
    if not items:
        return []
    return [f"## {title}", ""] + [f"- {item}" for item in items] + [""]


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
    else:
        parts += _section("What the logs say", [f"`{s}`" if "`" not in s else s for s in entry.error_strings])
    parts += _section("Confirm it", [f"`gpudoctor probe {p}`" for p in entry.probes])
    parts += _section("Fix actions", [f"`{a.id}` ({a.safety}): {a.title}" for a in entry.fix_actions] + (
        [f"`gpudoctor fix {entry.id}` shows them as a diff, a command or exports; `--apply` writes the safe ones"]
        if entry.fix_actions else []))
    parts += _section("Related", [
        f"**{rel.id}** {titles[rel.id]}: {rel.why}" if rel.id in titles else f"**{rel.id}**: {rel.why}"
        for rel in entry.related
    ])
    parts += _section("Outside this catalogue", [f"*{p.topic}*: {p.note}" for p in entry.see_also])
    parts += _section("References", [
        f"[{ref.title}]({ref.url})" if links else f"{ref.title}: {ref.url}" for ref in entry.references
    ])
    return "\n".join(parts).rstrip() + "\n"
