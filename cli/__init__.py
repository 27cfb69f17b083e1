"""gpudoctor: name the cause of a failed distributed PyTorch run, confirm it, and fix it."""

__version__ = "0.1.0"
