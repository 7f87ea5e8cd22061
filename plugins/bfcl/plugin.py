"""The bfcl plugin: BFCL v3 multi-turn as a seal-platform environment, with its heuristic diagnoser and the
training-interface evolution. Thin hook implementations; the work is done in the sibling modules, which are
imported inside the hooks so that loading this module stays cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from seal_platform import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec

if TYPE_CHECKING:  # pragma: no cover
    from seal_platform.capability import CapabilityState
    from seal_platform.context import RunContext
    from seal_platform.engine import RolloutEngine
    from seal_platform.types import Interface, SamplingParams, Task, Trajectory, TurnLabel

    from .environment import BfclEnvironment

SECTION = "bfcl"
SHARED_KEY = "bfcl.environments"


def _settings(ctx: RunContext) -> Any:
    from .settings import BfclSettings

    return ctx.settings_for(SECTION, BfclSettings)


def build_environment(ctx: RunContext) -> BfclEnvironment:
    """The environment factory: settings from the recipe's ``bfcl`` section; workers start on first use."""
    from .environment import BfclEnvironment

    environment = BfclEnvironment(_settings(ctx))
    ctx.shared.setdefault(SHARED_KEY, []).append(environment)
    return environment


@hookimpl
def register_settings() -> dict[str, Any]:
    from .settings import BfclSettings

    return {SECTION: BfclSettings}


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [
        EnvironmentSpec(
            "bfcl",
            build_environment,
            "BFCL v3 multi-turn (base, miss_func, miss_param, long_context) with the official binary verifier",
            splits=_splits,
        )
    ]


def _splits(settings: dict[str, Any]) -> tuple[str, ...]:
    """The splits ``tasks`` can read under the recipe's settings: each name of the bfcl data's splits whose data
    split (``train`` and ``eval`` through ``train_split`` / ``eval_split``, any other as given) is one of them.
    Settings validation refuses a ``train_split`` or ``eval_split`` the data lacks, so these are all of them."""
    from .data import SPLITS
    from .settings import BfclSettings

    section = settings.get(SECTION)
    if not isinstance(section, BfclSettings):  # the section failed validation, a problem reported on its own;
        return SPLITS  # every valid train_split / eval_split reads one of the data's splits
    return tuple(split for split in SPLITS if section.data_split(split) in SPLITS)


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    from .diagnoser import ALL_LABELS, MEANINGS, REFINES

    return [
        DiagnoserSpec(
            "bfcl",
            "heuristic per-turn labels from the BFCL verifier trace (reference taxonomy plus finer labels)",
            labels=ALL_LABELS,
            reference=dict(REFINES),
            meanings=dict(MEANINGS),
            environments=("bfcl",),
        )
    ]


@hookimpl
def collect(
    ctx: RunContext,
    environment: BfclEnvironment,
    engine: RolloutEngine,
    tasks: list[Task],
    interface: Interface,
    group_size: int,
    step: int,
    sampling: SamplingParams,
) -> list[Trajectory]:
    return environment.collect(engine, tasks, interface, group_size, step, sampling, ctx.executor.map, seed=ctx.seed)


@hookimpl
def evaluate(
    ctx: RunContext, environment: BfclEnvironment, engine: RolloutEngine, tasks: list[Task], step: int,
    sampling: SamplingParams, interface: Interface | None,
) -> list[Trajectory]:
    """Greedy rollouts on the pristine interface (or the one the core passes), verified; the core scores them
    per category."""
    return environment.evaluation_rollouts(engine, tasks, step, ctx.executor.map, sampling, interface)


@hookimpl
def diagnose(trajectories: list[Trajectory]) -> list[TurnLabel]:
    """Called by the core only in runs of the ``bfcl`` environment (the diagnoser's ``environments``)."""
    from . import diagnoser

    return diagnoser.diagnose(trajectories)


@hookimpl
def evolve_interface(
    ctx: RunContext, environment: Any, interface: Interface, state: CapabilityState, step: int
) -> Interface | None:
    from seal_platform_libs.toolenv import evolution

    settings = _settings(ctx)
    return evolution.evolve(interface, state, settings.evolution, list(settings.categories))


@hookimpl
def end_run(ctx: RunContext, status: str) -> None:
    for environment in ctx.shared.pop(SHARED_KEY, []):
        environment.close()
