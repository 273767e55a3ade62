"""The TUI's widgets, one per file: the chat pane and its answer blocks, the controls, the server pane and the
generator form."""
