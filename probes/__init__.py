"""Live probes: small declarations run in child processes that confirm or rule out a catalogue entry here.

Importing this package (or any module but the probe bodies that need it) never imports torch.
"""
from gpudoctor.probes.base import Probe, Result, Status

__all__ = ["Probe", "Result", "Status"]
