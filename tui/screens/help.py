"""The help screen: every flow and its keys on one page."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# gpudoctor

**Search** — type what you see or paste an error line; results re-rank as you type.
`↓` moves to the results, `enter` opens an entry, `esc` clears.

**Entry** — the catalogue entry as `gpudoctor show --markdown` prints it.
`r` focuses the related entries, `p` runs its probes, `f` plans its fix, `esc` goes back.

**Logs** — `ctrl+o` opens a file, a directory of per-rank logs, or pasted text.
Findings are ranked with their tier (match / possible) and score.
`n` / `N` jump to the next / previous evidence line, `e` opens the entry,
`p` runs its probes, `f` plans its fix with what the log gave away, `[` `]` switch per-rank files, `t` shows the rank timeline,
`l` focuses the log (`↑ ↓ pgup pgdn home end`), `esc` cancels a running diagnosis.

**Stacks** — `ctrl+s` dumps, with py-spy, where each rank of a job running on this
machine is stopped, saves the dumps in a new `gpudoctor-stacks-<time>` folder and
opens their diagnosis (a rank in a save while the others wait in a collective: D21).

**Probes** — `ctrl+r` runs every probe on this machine; an entry's `p` runs its own.
Rows fill in live; `esc` cancels and kills the probes' processes.
`enter` on a row shows its evidence; the collectives probe draws busbw by size.

**Fix** — the fix as a coloured diff against the script (`s` to name it), or the
launch command rewritten (`c` to type it; params such as `bad_gpu=3` beside it).
`a` applies the safe fixes, `A` also the unsafe ones (each says why), always
after a yes/no question; `u` undoes the last applied fix.

**Lint** — `ctrl+l` (or `gpudoctor tui --script train.py`) checks a training
script: findings inline, `enter`/`e` opens the entry, `f` its fix.

**Anywhere** — `ctrl+p` command palette (every entry by id or title),
`ctrl+t` dark / light theme, `f1` or `?` this help, `ctrl+q` quit.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape", "app.pop_screen", "Close"), Binding("question_mark", "app.pop_screen", "Close"),
                Binding("f1", "app.pop_screen", "Close", show=False)]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-dialog"):
            yield Markdown(HELP)
