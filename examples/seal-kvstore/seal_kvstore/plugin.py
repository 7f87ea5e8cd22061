"""Hook implementations of the seal-kvstore example (docs/write-an-environment-plugin.md walks through it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from seal_platform import hookimpl
from seal_platform.config import Section
from seal_platform.registry import DiagnoserSpec, EngineSpec, EnvironmentSpec
from seal_platform.types import Interface, SamplingParams, Trajectory, TurnLabel

from . import diagnoser, evolution
from .env import SYSTEM, KVEnvironment, KVSettings

NAME = "kvstore"


class OracleSettings(Section):
    """Settings section ``kv_oracle`` (the scripted engine)."""

    skill: float = Field(default=0.8, ge=0.0, le=1.0, description="Chance that each call is written right.")


def _settings(ctx: Any) -> KVSettings:
    return ctx.settings_for(NAME, KVSettings)


@hookimpl
def register_settings() -> dict[str, type[BaseModel]]:
    return {NAME: KVSettings, "kv_oracle": OracleSettings}


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [
        EnvironmentSpec(
            NAME, lambda ctx: KVEnvironment(_settings(ctx)), "a multi-turn key-value-store tool environment (example)"
        )
    ]


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    return [DiagnoserSpec(NAME, "one label per turn from the kvstore verifier's checks", labels=diagnoser.LABELS,
                          reference=dict(diagnoser.REFINES), meanings=dict(diagnoser.MEANINGS), environments=(NAME,))]


@hookimpl
def register_rollout_engines() -> list[EngineSpec]:
    def build(ctx: Any) -> Any:
        from .oracle import OracleEngine

        return OracleEngine(ctx.settings_for("kv_oracle", OracleSettings).skill, seed=ctx.seed)

    return [EngineSpec("kv-oracle", build, "scripted kvstore agent (no model), for trying the loop")]


@hookimpl
def collect(ctx: Any, environment: KVEnvironment, engine: Any, tasks: list, interface: Interface, group_size: int,
            step: int, sampling: SamplingParams) -> list[Trajectory]:
    jobs = [(task, f"{step}:{task.id}", j) for task in tasks for j in range(group_size)]
    return environment.play_all(ctx.executor.map, engine, jobs, interface, sampling)


@hookimpl
def evaluate(ctx: Any, environment: KVEnvironment, engine: Any, tasks: list, step: int,
             sampling: SamplingParams) -> list[Trajectory]:
    jobs = [(task, f"eval{step}:{task.id}", 0) for task in tasks]
    return environment.play_all(ctx.executor.map, engine, jobs, environment.pristine_interface(), sampling)


@hookimpl
def diagnose(trajectories: list[Trajectory]) -> list[TurnLabel]:
    # Called only in kvstore runs: the core honours the diagnoser's `environments`.
    return diagnoser.diagnose(trajectories)


@hookimpl
def evolve_interface(ctx: Any, interface: Interface, state: Any) -> Interface | None:
    return evolution.evolve(interface, state, _settings(ctx).evolution, SYSTEM)
