"""The BFCL v3 multi-turn categories, the one list of them: a module of its own, so that the settings (imported
whenever the plugin loads) and the data (which the settings read lazily) share it without an import cycle and
without a heavy import at plugin load."""

from __future__ import annotations

CATEGORIES: tuple[str, ...] = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
