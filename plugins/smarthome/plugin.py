"""The smarthome plugin: a CPU-sized multi-turn tool environment, its diagnoser and its training-interface
evolution (BFCL's changes: schema affordances, recovery feedback, guidelines, through
:func:`seal_platform.toolenv.evolution.evolve`, with this environment's own cue texts, :mod:`.cues`)."""

from __future__ import annotations

from typing import Any

from seal_platform.config import Issue
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec
from seal_platform.toolenv.episodes import (evaluation_episodes, lockstep_executor_issues, tool_call_sampling,
                                            training_episodes)

NAME = "smarthome"


def _settings(ctx: Any) -> Any:
    from .settings import SmartHomeSettings

    return ctx.settings_for(NAME, SmartHomeSettings)


def _build(ctx: Any) -> Any:
    from .environment import SmartHomeEnvironment

    return SmartHomeEnvironment(_settings(ctx))


@hookimpl
def register_settings() -> dict[str, type]:
    from .settings import SmartHomeSettings

    return {NAME: SmartHomeSettings}


@hookimpl
def check_config(config: Any, settings: dict[str, Any], cluster: Any) -> list[Issue]:
    """smarthome plays its episodes in lock step in the run's process (one engine call per round for all of
    them, which is what batches generation) and never hands them to ``ctx.executor``: a recipe that names an
    executor for a smarthome run asks for something that would go unused."""
    return lockstep_executor_issues(
        config, NAME, "each round's generations batched in one engine call",
        'remove rollout.executor or set it to local; to go faster, scale the rollout engine instead')


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
def collect(ctx: Any, environment: Any, engine: Any, tasks: list, interface: Any, group_size: int, step: int) -> list:
    from .episode import run_episodes

    s = environment.settings
    return run_episodes(engine, training_episodes(tasks, group_size, step), interface,
                        tool_call_sampling(ctx, False, s.max_new_tokens),
                        s.attempts_per_turn, s.worked_examples, s.example_results)


@hookimpl
def evaluate(ctx: Any, environment: Any, engine: Any, tasks: list, step: int, interface: Any) -> list:
    """Verified greedy episodes on the pristine interface (or the one the core passes); the core scores them
    per category."""
    from .episode import run_episodes

    s = environment.settings
    return run_episodes(engine, evaluation_episodes(tasks, step), interface or environment.pristine_interface(),
                        tool_call_sampling(ctx, True, s.max_new_tokens), s.attempts_per_turn, s.worked_examples,
                        s.example_results)


@hookimpl
def diagnose(trajectories: list) -> list:
    """Called by the core only in runs of this plugin's environment (the diagnoser's ``environments``)."""
    from . import diagnoser

    return diagnoser.diagnose(trajectories)


@hookimpl
def evolve_interface(ctx: Any, environment: Any, interface: Any, state: Any, step: int) -> Any:
    from seal_platform.toolenv.evolution import evolve

    from .cues import CUES

    settings = _settings(ctx)
    return evolve(interface, state, settings.evolution, list(settings.categories), CUES)
