"""Exit codes and the one exception type that carries a user-facing error."""

EXIT_OK = 0  # a result: an entry shown, a cause named, every check passed
EXIT_NOTHING = 1  # ran fine, found nothing (no match, no known cause) or a check failed
EXIT_USAGE = 2  # bad usage or bad input: unknown id, unreadable file, malformed YAML
EXIT_INTERNAL = 3  # a bug in gpudoctor: one line on stderr names the report file with the traceback
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """An error the user can act on: printed as one message, never as a traceback."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.message = message
        self.code = code

