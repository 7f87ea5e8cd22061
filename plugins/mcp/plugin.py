"""The mcp plugin: train on the tools of MCP servers named in the recipe (environment ``mcp``), its
diagnoser (BFCL taxonomy) and its training-interface evolution on the servers' tool docs."""

from __future__ import annotations

from typing import Any

from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec
from seal_platform.toolenv.episodes import (evaluation_episodes, scored_without_infra_failures, tool_call_sampling,
                                           training_episodes)
from seal_platform.types import EvalResult

NAME = "mcp"


def _settings(ctx: Any) -> Any:
    from .settings import MCPSettings

    return ctx.settings_for(NAME, MCPSettings)


def _is_ours(environment: Any) -> bool:
    from .environment import MCPEnvironment

    return isinstance(environment, MCPEnvironment)


def _build(ctx: Any) -> Any:
    from seal_platform.errors import ConfigError

    from .environment import MCPEnvironment

    settings = _settings(ctx)
    missing = [key for key, value in (("settings.mcp.servers", settings.servers), ("settings.mcp.tasks", settings.tasks))
               if not value]
    if missing:
        raise ConfigError(f"environment mcp needs {' and '.join(missing)} in the recipe: the MCP servers to start and "
                          "the JSON Lines task file (see docs/mcp.md and recipes/mcp-example.yaml).")
    return MCPEnvironment(settings)


@hookimpl
def register_settings() -> dict[str, type]:
    from .settings import MCPSettings

    return {NAME: MCPSettings}


@hookimpl
def check_machine(config: Any, settings: dict[str, Any], cluster: Any) -> list[str]:
    """The task file must be here before the run starts (a relative path is read from the current directory,
    so a recipe run from another folder would otherwise leave a failed run in the store)."""
    from pathlib import Path

    uses = config.environment == NAME or any(b.environment == NAME for b in config.evaluation.benchmarks)
    ours = settings.get(NAME)
    tasks = getattr(ours, "tasks", "")
    if not uses or not tasks or Path(tasks).expanduser().is_file():
        return []
    return [f"settings.mcp.tasks: there is no file {tasks!r} here (relative paths are read from the current "
            f"directory, {Path.cwd()}): run from the folder the recipe's paths are relative to (the repository's "
            "root for recipes/mcp-example.yaml), or give an absolute path."]


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [EnvironmentSpec(NAME, _build, "the tools of MCP servers named in the recipe (stdio or streamable HTTP), "
                                          "tasks from a JSON Lines file, turns checked by calls against the server")]


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    from .diagnoser import LABELS, MEANINGS, REFERENCE

    return [DiagnoserSpec(NAME, "per-turn labels from the mcp verifier (BFCL taxonomy)", labels=LABELS,
                          reference=dict(REFERENCE), meanings=dict(MEANINGS), environments=(NAME,))]


@hookimpl
def collect(ctx: Any, environment: Any, engine: Any, tasks: list, interface: Any, group_size: int, step: int) -> list | None:
    if not _is_ours(environment):
        return None
    from .episode import run_episodes

    return run_episodes(environment, engine, training_episodes(tasks, group_size, step), interface,
                        tool_call_sampling(ctx, False, environment.settings.max_new_tokens))


@hookimpl
def evaluate(ctx: Any, environment: Any, engine: Any, tasks: list, step: int) -> EvalResult | None:
    if not _is_ours(environment):
        return None
    from .episode import run_episodes

    trajs = run_episodes(environment, engine, evaluation_episodes(tasks, step), environment.pristine_interface(),
                         tool_call_sampling(ctx, True, environment.settings.max_new_tokens))
    return scored_without_infra_failures(ctx, tasks, trajs)


@hookimpl
def diagnose(trajectories: list) -> list:
    """Called by the core only in runs of this plugin's environment (the diagnoser's ``environments``)."""
    from .diagnoser import diagnose as run

    return run(trajectories)


@hookimpl
def evolve_interface(ctx: Any, environment: Any, interface: Any, state: Any, step: int) -> Any:
    if not _is_ours(environment):
        return None
    from .evolution import evolve

    return evolve(interface, state, _settings(ctx).evolution)
