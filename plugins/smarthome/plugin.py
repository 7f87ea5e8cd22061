"""The smarthome plugin: a CPU-sized multi-turn tool environment, its diagnoser and its training-interface
evolution (BFCL's changes: schema affordances, recovery feedback, guidelines, through
:func:`seal_platform_libs.toolenv.evolution.evolve`, with this environment's own cue texts, :mod:`.cues`)."""

from __future__ import annotations

from typing import Any

from seal_platform.config import Issue
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec
from seal_platform_libs.toolenv.hooks import LockstepHooks

NAME = "smarthome"


def _settings_model() -> type:
    from .settings import SmartHomeSettings

    return SmartHomeSettings


# smarthome plays its episodes in lock step in the run's process (one engine call per round for all of them,
# which is what batches generation) and never hands them to ``ctx.executor``.
HOOKS = LockstepHooks(NAME, _settings_model, batches="each round's generations batched in one engine call",
                      fix="remove rollout.executor or set it to local; to go faster, scale the rollout engine instead")
register_settings, collect = HOOKS.register_settings, HOOKS.collect


def _build(ctx: Any) -> Any:
    from .environment import SmartHomeEnvironment

    return SmartHomeEnvironment(HOOKS.settings(ctx))


@hookimpl
def check_config(config: Any, settings: dict[str, Any], cluster: Any) -> list[Issue]:
    """The recipe problems of lock-step episodes (:meth:`LockstepHooks.recipe_issues`)."""
    return HOOKS.recipe_issues(config)


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [EnvironmentSpec(NAME, _build, "smart-home tool use: 4 tools with enums, 2-3 user turns, seeded tasks "
                                          "sized for a CPU and the embedded 135M model",
                            splits=("train", "eval"))]


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    from .diagnoser import LABELS

    return [DiagnoserSpec(NAME, "per-turn labels from the smart-home verifier (BFCL taxonomy)", labels=LABELS,
                          environments=(NAME,))]


@hookimpl
def evaluate(ctx: Any, environment: Any, engine: Any, tasks: list, step: int, interface: Any) -> list:
    """Verified greedy episodes on the pristine interface (or the one the core passes); the core scores them
    per category."""
    return HOOKS.evaluation_trajectories(ctx, environment, engine, tasks, step, interface)


@hookimpl
def diagnose(trajectories: list) -> list:
    """Called by the core only in runs of this plugin's environment (the diagnoser's ``environments``)."""
    from . import diagnoser

    return diagnoser.diagnose(trajectories)


@hookimpl
def evolve_interface(ctx: Any, environment: Any, interface: Any, state: Any, step: int) -> Any:
    from seal_platform_libs.toolenv.evolution import evolve

    from .cues import CUES

    settings = HOOKS.settings(ctx)
    return evolve(interface, state, settings.evolution, list(settings.categories), CUES)
