"""The shipped YAML recipes, installed as the data package ``seal_platform_recipes`` (see pyproject.toml),
so a non-editable install finds them from any directory."""
