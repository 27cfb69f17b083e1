"""`gpudoctor check`: placeholder until the probes work lands (being written now)."""
from gpudoctor.errors import UserError

HELP = "live probes (in progress)"


def add_arguments(parser) -> None:
    pass


def run(args, out) -> int:
    raise UserError("'check' is not available yet")
