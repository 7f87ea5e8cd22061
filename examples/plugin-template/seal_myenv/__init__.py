"""seal-myenv: a seal-platform environment plugin made from examples/plugin-template."""
