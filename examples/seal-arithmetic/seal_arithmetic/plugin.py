"""Hook implementations of the seal-arithmetic example plugin."""

from __future__ import annotations

from typing import Any

from seal_platform import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec
from seal_platform.types import EvalResult, SamplingParams

from .env import REFERENCE_LABELS, ArithmeticEnvironment, ArithmeticSettings

NAME = "arithmetic"


def _env(ctx: Any) -> ArithmeticEnvironment:
    return ArithmeticEnvironment(ctx.settings_for(NAME, ArithmeticSettings))


def _sampling(ctx: Any, env: ArithmeticEnvironment, greedy: bool, max_new_tokens: int | None = None) -> SamplingParams:
    rollout = ctx.config.rollout
    return SamplingParams(
        temperature=0.0 if greedy else rollout.temperature,
        top_p=1.0 if greedy else rollout.top_p,
        max_new_tokens=max_new_tokens or env.settings.max_new_tokens or rollout.max_new_tokens,
        stop=["</tool_call>"],
    )


@hookimpl
def register_settings() -> dict[str, type]:
    return {NAME: ArithmeticSettings}


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [EnvironmentSpec(name=NAME, factory=_env, description="arithmetic with a calculator tool (example plugin)")]


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    return [DiagnoserSpec(name=NAME, description="one label per question from the calculator call",
                          labels=tuple(REFERENCE_LABELS))]


@hookimpl
def collect(ctx: Any, environment: Any, engine: Any, tasks: list, interface: Any, group_size: int, step: int) -> list:
    if not isinstance(environment, ArithmeticEnvironment):
        return None
    episodes = [(task, f"{step}:{task.id}", j) for task in tasks for j in range(group_size)]
    return environment.run_episodes(engine, episodes, interface, _sampling(ctx, environment, greedy=False))


@hookimpl
def diagnose(ctx: Any, environment: Any, trajectories: list, step: int) -> list:
    if not isinstance(environment, ArithmeticEnvironment):
        return []
    return [environment.diagnose(t, NAME) for t in trajectories]


@hookimpl
def evaluate(ctx: Any, environment: Any, engine: Any, tasks: list, step: int) -> EvalResult:
    if not isinstance(environment, ArithmeticEnvironment):
        return None
    trajs = environment.run_episodes(
        engine, [(t, f"eval:{t.id}", 0) for t in tasks], environment.pristine_interface(),
        _sampling(ctx, environment, greedy=True, max_new_tokens=ctx.config.evaluation.max_new_tokens),
    )
    per_cat: dict[str, list[float]] = {}
    for t in trajs:
        per_cat.setdefault(t.category, []).append(t.reward)
    return EvalResult(split=tasks[0].split if tasks else "eval",
                      per_category={c: 100.0 * sum(v) / len(v) for c, v in per_cat.items()},
                      n_tasks=len(tasks), trajectories=trajs)
