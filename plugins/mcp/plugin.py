"""The mcp plugin: train on the tools of MCP servers named in the recipe (environment ``mcp``), its
diagnoser (BFCL taxonomy) and its training-interface evolution on the servers' tool docs."""

from __future__ import annotations

from typing import Any

from seal_platform.config import Issue
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec
from seal_platform.toolenv.episodes import (evaluation_episodes, lockstep_executor_issues, scored_without_infra_failures,
                                           tool_call_sampling, training_episodes)
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
    environment = MCPEnvironment(settings)
    problems = environment.tool_problems()  # starts each server once to list its tools
    if problems:
        raise ConfigError(_tools_missing(problems))
    return environment


def _tools_missing(problems: list[str]) -> str:
    shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
    return (f"the mcp recipe and task file name tools its servers do not offer: {shown}. Fix the names (a tool_prefix "
            "is part of the name the tasks use), or the servers in settings.mcp.servers; see docs/mcp.md.")


@hookimpl
def register_settings() -> dict[str, type]:
    from .settings import MCPSettings

    return {NAME: MCPSettings}


@hookimpl
def check_machine(config: Any, settings: dict[str, Any], cluster: Any) -> list[str]:
    """What a run of the mcp environment needs from this machine, probed before anything starts (otherwise each
    would leave a failed run in the store, after the model load): the task file, every stdio server's command
    (found on PATH, or an executable file) and working directory, and every URL server's address (it parses,
    with a host; the server is not contacted here)."""
    from pathlib import Path

    uses = config.environment == NAME or any(b.environment == NAME for b in config.evaluation.benchmarks)
    ours = settings.get(NAME)
    if not uses or ours is None:
        return []
    problems = []
    tasks = ours.tasks
    if tasks and not Path(tasks).expanduser().is_file():
        problems.append(f"settings.mcp.tasks: there is no file {tasks!r} here (relative paths are read from the "
                        f"current directory, {Path.cwd()}): run from the folder the recipe's paths are relative to "
                        "(the repository's root for recipes/mcp-example.yaml), or give an absolute path.")
    from .probe import server_problems, tool_problems

    for index, server in enumerate(ours.servers):
        problems += server_problems(f"settings.mcp.servers[{index}]", server)
    if not problems:  # each server started once, its tools listed and the tasks' tool names checked
        problems += tool_problems(ours)
    return problems


@hookimpl
def check_config(config: Any, settings: dict[str, Any], cluster: Any) -> list[Issue]:
    """The task file of a recipe that uses mcp: it is there and every line is a valid task (the servers are
    not started here: ``check_machine``, before a run, and ``check-env`` list their tools and check the
    names). And mcp plays its episodes in lock step in the run's process (in chunks; one engine call per round
    for a chunk, which is what batches generation) and never hands them to ``ctx.executor``: a recipe that
    names an executor for an mcp run asks for something that would go unused."""
    issues: list[Issue] = []
    ours = settings.get(NAME)
    uses = config.environment == NAME or any(b.environment == NAME for b in config.evaluation.benchmarks)
    if uses and ours is not None and ours.tasks:
        from pathlib import Path

        from .tasks import load_tasks

        if not Path(ours.tasks).expanduser().is_file():
            return [Issue("settings.mcp.tasks", f"there is no file {ours.tasks!r} here (relative paths are read from "
                          f"the current directory, {Path.cwd()})", "run from the folder the recipe's paths are relative "
                          "to (the repository's root for recipes/mcp-example.yaml), or give an absolute path")]
        try:
            load_tasks(ours.tasks)
        except (OSError, ValueError) as exc:
            issues.append(Issue("settings.mcp.tasks", str(exc).rstrip("."),
                                "give the JSON Lines task file described in docs/mcp.md (relative paths are read from "
                                "the current directory)"))
    return issues + lockstep_executor_issues(
        config, NAME, "in chunks of settings.mcp.max_parallel_episodes, each round's generations batched in one engine call",
        'remove rollout.executor or set it to local; for more episodes at once raise settings.mcp.max_parallel_episodes')


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [EnvironmentSpec(NAME, _build, "the tools of MCP servers named in the recipe (stdio or streamable HTTP), "
                                          "tasks from a JSON Lines file, turns checked by calls against the server",
                            splits=_splits)]


def _splits(settings: dict[str, Any]) -> set[str] | None:
    """The task file's splits; None where it cannot be read (check_machine, or the environment, says why)."""
    from .tasks import load_tasks

    ours = settings.get(NAME)
    if ours is None or not ours.tasks:
        return None
    try:
        return {task.split for task in load_tasks(ours.tasks)}
    except (OSError, ValueError):
        return None


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
    from . import diagnoser

    return diagnoser.diagnose(trajectories)


@hookimpl
def evolve_interface(ctx: Any, environment: Any, interface: Any, state: Any, step: int) -> Any:
    if not _is_ours(environment):
        return None
    from .evolution import evolve

    return evolve(interface, state, _settings(ctx).evolution)
