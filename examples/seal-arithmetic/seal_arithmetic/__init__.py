"""seal-arithmetic: an example seal-platform environment plugin (calculator tool use)."""
