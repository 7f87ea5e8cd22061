"""Hook implementations of the seal-arithmetic example plugin."""

from __future__ import annotations

from typing import Any

from seal_platform import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec
from seal_platform.types import SamplingParams

from .env import REFERENCE_LABELS, ArithmeticEnvironment, ArithmeticSettings

NAME = "arithmetic"


def _env(ctx: Any) -> ArithmeticEnvironment:
    return ArithmeticEnvironment(ctx.settings_for(NAME, ArithmeticSettings))


def _own(sampling: SamplingParams, env: ArithmeticEnvironment) -> SamplingParams:
    """The core's sampling (recipe's rollout, or greedy for evaluation) plus what is this environment's own:
    the stop string of its call format and its cap on tokens per generation."""
    cap = env.settings.max_new_tokens or sampling.max_new_tokens
    return sampling.model_copy(update={"stop": ["</tool_call>"], "max_new_tokens": min(cap, sampling.max_new_tokens)})


@hookimpl
def register_settings() -> dict[str, type]:
    return {NAME: ArithmeticSettings}


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [EnvironmentSpec(name=NAME, factory=_env, description="arithmetic with a calculator tool (example plugin)",
                            splits=("train", "eval"))]


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    return [DiagnoserSpec(name=NAME, description="one label per question from the calculator call",
                          labels=tuple(REFERENCE_LABELS), environments=(NAME,),
                          reference={label: (ref,) for label, ref in REFERENCE_LABELS.items() if label != ref})]


@hookimpl
def collect(environment: Any, engine: Any, tasks: list, interface: Any, group_size: int, step: int,
            sampling: SamplingParams) -> list:
    episodes = [(task, f"{step}:{task.id}", j) for task in tasks for j in range(group_size)]
    return environment.run_episodes(engine, episodes, interface, _own(sampling, environment))


@hookimpl
def diagnose(environment: Any, trajectories: list) -> list:
    # Called only in arithmetic runs: the core honours the diagnoser's `environments`.
    return [environment.diagnose(t, NAME) for t in trajectories]


@hookimpl
def evaluate(environment: Any, engine: Any, tasks: list, sampling: SamplingParams) -> list:
    """Verified greedy episodes on the pristine interface; the core scores them per category."""
    return environment.run_episodes(
        engine, [(t, f"eval:{t.id}", 0) for t in tasks], environment.pristine_interface(), _own(sampling, environment)
    )
