"""Why a fix cannot be planned or applied: each carries a one-line message for the user."""
from __future__ import annotations


UNSAFE = "unsafe: "  # a patch's note that starts so makes a safe fix unsafe (applied only with --unsafe)


class FixError(Exception):
    """A fix could not be planned or applied; the message names the file and what is wrong."""


class NotApplicable(FixError):
    """The file does not contain the pattern this fix rewrites (or already has the fix)."""


class StaleFileError(FixError):
    """A file changed between the preview and apply (or since the fix was applied, for undo). `what` says which file
    and how, without the advice the command line adds (a TUI plans again itself)."""

    def __init__(self, what: str, advice: str = ""):
        self.what = what
        super().__init__(f"{what}; {advice}" if advice else what)


class BrokenResultError(FixError):
    """The edited file would no longer parse; nothing was written."""


class NothingRecorded(FixError):
    """No applied fix is recorded: nothing to undo or forget (exit 1, not a usage error)."""
