"""grpo plugin for seal-platform."""
