"""Settings section ``ray`` (the ray_backend plugin's): whether the run uses Ray, the cluster to join, and the
``ray`` executor's actors. Only pydantic is imported here.

Where engine replicas and trainer workers go on Ray is the business of the plugin that builds them (grpo's
``grpo.placement``); they reach the cluster through the core's typed contract (``ctx.cluster``).
"""

from __future__ import annotations

from pydantic import Field

from seal_platform.config import RUNTIME, Section


class RaySettings(Section):
    """Scale-out on Ray. Off by default: the single-machine run never starts Ray."""

    enabled: bool = Field(
        default=False,
        description="Run on Ray: the run's cluster (ctx.cluster) is Ray, for the parts that use it (the `ray` "
        "executor, grpo's engine replicas and trainer workers).",
        json_schema_extra=RUNTIME,
    )
    address: str | None = Field(
        default=None,
        description="Join this cluster (`auto`, `HOST:6379`, `ray://HOST:10001`); null: start a local Ray when "
        "enabled. From the command line: `seal-platform run RECIPE settings.ray.enabled=true "
        "settings.ray.address=ADDR` (also with --resume RUN).",
        json_schema_extra=RUNTIME,
    )
    namespace: str = Field(default="seal-platform", description="Ray namespace of the run's actors.",
                           json_schema_extra=RUNTIME)
    num_cpus: int | None = Field(default=None, ge=1, le=100_000, description="CPUs of a local Ray (null: all).",
                                 json_schema_extra=RUNTIME)
    episode_actors: int = Field(
        default=2, ge=1, le=4096,
        description="Episode actors of the ray executor (they share rollout.workers concurrent episodes between them).",
    )
    episode_cpus: float = Field(default=0.25, ge=0.0, description="CPUs reserved per episode actor.")
