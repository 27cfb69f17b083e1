"""gpudoctor.engine package."""
