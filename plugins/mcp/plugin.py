"""The mcp plugin: train on the tools of MCP servers named in the recipe (environment ``mcp``), its
diagnoser (BFCL taxonomy) and its training-interface evolution on the servers' tool docs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seal_platform.config import Issue
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec
from seal_platform_libs.toolenv.hooks import LockstepHooks

NAME = "mcp"


def _settings_model() -> type:
    from .settings import MCPSettings

    return MCPSettings


# mcp plays its episodes in lock step in the run's process (in chunks; one engine call per round for a chunk,
# which is what batches generation) and never hands them to ``ctx.executor``.
HOOKS = LockstepHooks(
    NAME,
    _settings_model,
    batches="in chunks of settings.mcp.max_parallel_episodes, each round's generations batched in one engine call",
    fix=(
        "remove rollout.executor or set it to local; for more episodes at once raise "
        "settings.mcp.max_parallel_episodes"
    ),
)
register_settings, collect, evaluate = HOOKS.register_settings, HOOKS.collect, HOOKS.evaluate


def _build(ctx: Any) -> Any:
    from seal_platform.errors import ConfigError

    from .environment import MCPEnvironment

    settings = HOOKS.settings(ctx)
    missing = [
        key
        for key, value in (("settings.mcp.servers", settings.servers), ("settings.mcp.tasks", settings.tasks))
        if not value
    ]
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
def check_machine(config: Any, settings: dict[str, Any], cluster: Any) -> list[str]:
    """What a run of the mcp environment needs from this machine, probed before anything starts (otherwise each
    would leave a failed run in the store, after the model load): the task file, every stdio server's command
    (found on PATH, or an executable file) and working directory, and every URL server's address (it parses,
    with a host; the server is not contacted here)."""
    ours = settings.get(NAME)
    if not HOOKS.uses(config) or ours is None:
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
    names); and the recipe problems of lock-step episodes (:meth:`LockstepHooks.recipe_issues`)."""
    ours = settings.get(NAME)  # None: the section failed validation, a problem reported on its own
    if ours is None:
        return HOOKS.recipe_issues(config)
    if HOOKS.uses(config) and ours.tasks and not Path(ours.tasks).expanduser().is_file():
        return [Issue("settings.mcp.tasks", f"there is no file {ours.tasks!r} here (relative paths are read from "
                      f"the current directory, {Path.cwd()})", "run from the folder the recipe's paths are relative "
                      "to (the repository's root for recipes/mcp-example.yaml), or give an absolute path")]
    from .tasks import load_tasks

    return HOOKS.task_file_issues(config, ours.tasks, load_tasks, "docs/mcp.md") + HOOKS.recipe_issues(config)


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
def diagnose(trajectories: list) -> list:
    """Called by the core only in runs of this plugin's environment (the diagnoser's ``environments``)."""
    from . import diagnoser

    return diagnoser.diagnose(trajectories)


@hookimpl
def evolve_interface(ctx: Any, environment: Any, interface: Any, state: Any, step: int) -> Any:
    from .evolution import evolve

    return evolve(interface, state, HOOKS.settings(ctx).evolution)
