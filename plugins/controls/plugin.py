"""The controls plugin: ``random_labels`` and ``fixed_label`` diagnosers (see :mod:`.labels`)."""

from __future__ import annotations

import random
from typing import Any

from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec

from .labels import FIXED, RANDOM, ControlSettings, fixed_labels, random_labels, seen_labels

SECTION = "controls"
CACHE = "controls.seen"


def _enabled(ctx: Any, name: str) -> bool:
    return name in ctx.diagnosers  # the core's list: controls are explicit, so only when the recipe names them


@hookimpl
def register_settings() -> dict[str, type]:
    return {SECTION: ControlSettings}


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    return [
        DiagnoserSpec(RANDOM, "control: labels drawn (seeded) from the label distribution the run has seen so far",
                      explicit=True),
        DiagnoserSpec(FIXED, "control: the same label on every turn", explicit=True),
    ]


@hookimpl
def diagnose(ctx: Any, trajectories: list, step: int) -> list:
    """Only the control diagnosers the run enabled (``ctx.diagnosers``) label; both are ``explicit``, so the
    core enables them only when the recipe names them (``diagnosis.diagnosers: null`` leaves them out)."""
    settings = ctx.settings_for(SECTION, ControlSettings)
    out = []
    if _enabled(ctx, FIXED):
        out += fixed_labels(trajectories, settings.fixed_label, settings.fixed_reference_label)
    if _enabled(ctx, RANDOM):
        seen = seen_labels(ctx.store, ctx.run_id, step, ctx.shared.setdefault(CACHE, {}))
        rng = random.Random(f"{ctx.seed}:{RANDOM}:{step}")
        initial = (settings.initial_label, settings.initial_reference_label or settings.initial_label)
        out += random_labels(trajectories, seen, rng, initial)
    return out
