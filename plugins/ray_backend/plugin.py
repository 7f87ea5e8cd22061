"""Hook implementations of the ray_backend plugin (``ray`` is imported only inside the factories).

Registers the ``ray`` executor (``rollout.executor: ray``): environment episodes run in Ray actors, an
episode lost to the infrastructure (its actor or node died, it ran past ``rollout.episode_timeout_s``)
becomes an ``infra_failure`` trajectory. Engine replicas on Ray are built by the engine's own plugin (grpo)
with :mod:`.engines`.
"""

from __future__ import annotations

from typing import Any, Callable

from seal_platform.hookspecs import hookimpl
from seal_platform.registry import ExecutorSpec


def _ray_executor(ctx: Any, on_progress: Callable[[int, int], None] | None) -> Any:
    from .executor import RayExecutor

    rollout = ctx.config.rollout
    return RayExecutor(ctx.config.ray, workers=rollout.workers, episode_timeout_s=rollout.episode_timeout_s,
                       on_progress=on_progress)


@hookimpl
def register_executors() -> list[ExecutorSpec]:
    return [ExecutorSpec("ray", _ray_executor, "episodes in Ray actors (local Ray or --ray-address); infra failures masked")]
