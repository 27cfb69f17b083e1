"""The TUI's own widgets: the virtualised log view, the rank timeline, the bandwidth chart."""
