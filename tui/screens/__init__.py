"""The TUI's screens: search, entry, logs, open, probes, help, confirm."""
