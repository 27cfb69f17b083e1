"""gpudoctor.tui package."""
