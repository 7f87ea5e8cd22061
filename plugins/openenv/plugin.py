"""The openenv plugin: train on an OpenEnv environment server named in the recipe (environment ``openenv``),
its heuristic diagnoser, and the training-interface evolution on the action doc."""

from __future__ import annotations

from typing import Any

from seal_platform.config import Issue
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import DiagnoserSpec, EnvironmentSpec
from seal_platform_libs.toolenv.hooks import LockstepHooks

NAME = "openenv"
_BUILT: list[Any] = []  # environments built in this process (their local servers stop at end_run)


def _settings_model() -> type:
    from .settings import OpenEnvSettings

    return OpenEnvSettings


# openenv plays its episodes in lock step in the run's process (in chunks; one engine call per round for a
# chunk, which is what batches generation) and never hands them to ``ctx.executor``.
HOOKS = LockstepHooks(
    NAME, _settings_model,
    batches="in chunks of settings.openenv.max_parallel_episodes, each round's generations batched in one engine call",
    fix="remove rollout.executor or set it to local; for more episodes at once raise "
        "settings.openenv.max_parallel_episodes (WebSocket transport)")
register_settings, collect, evaluate = HOOKS.register_settings, HOOKS.collect, HOOKS.evaluate


# Neither settings.openenv.url nor settings.openenv.server: refused by check_config with the recipe's other
# problems (before a run's row is written), and by the factory for a run planned some other way.
NO_SERVER = "needs settings.openenv.url (a running OpenEnv server) or settings.openenv.server (a local one to start)"
NO_SERVER_FIX = ("set settings.openenv.url to http://host:port, or settings.openenv.server to the command that starts "
                 "one; see docs/openenv.md and recipes/openenv-example.yaml")


def _build(ctx: Any) -> Any:
    from seal_platform.errors import ConfigError

    from .environment import OpenEnvEnvironment

    settings = HOOKS.settings(ctx)
    if not settings.url and settings.server is None:
        raise ConfigError(f"environment openenv {NO_SERVER} in the recipe ({NO_SERVER_FIX}).")
    environment = OpenEnvEnvironment(settings)
    _BUILT.append(environment)
    if environment.session_limit < settings.max_parallel_episodes and settings.transport == "ws":
        ctx.event("openenv_capacity", f"the OpenEnv server at {environment.url} serves "
                  f"{environment.session_limit} session(s) at once: episodes run {environment.session_limit} at a "
                  f"time, not settings.openenv.max_parallel_episodes={settings.max_parallel_episodes}",
                  session_limit=environment.session_limit, max_parallel_episodes=settings.max_parallel_episodes)
    return environment


@hookimpl
def check_machine(config: Any, settings: dict[str, Any], cluster: Any) -> list[str]:
    """The server a run of the openenv environment names, checked before anything starts (otherwise a server
    that is down, is not an OpenEnv server or cannot be started would leave a failed run in the store): a
    running one (settings.openenv.url) is probed -- it answers GET /health and its action is described, within
    settings.openenv.probe_timeout_s for each request, resolving its host name included; a local one
    (settings.openenv.server) is started by the run, so only its command (found on PATH, or an executable
    file) and working directory are checked."""
    ours = settings.get(NAME)
    if not HOOKS.uses(config) or ours is None:
        return []
    from .probe import server_problems, url_problems

    return server_problems(ours) + url_problems(ours)


@hookimpl
def check_config(config: Any, settings: dict[str, Any], cluster: Any) -> list[Issue]:
    """A recipe that trains or evaluates on openenv names its server: ``settings.openenv.url`` or
    ``settings.openenv.server`` (the settings' own validation refuses both at once); its task file, if it
    names one, is there and every line is a valid task; and the recipe problems of lock-step episodes
    (:meth:`LockstepHooks.recipe_issues`)."""
    issues: list[Issue] = []
    ours = settings.get(NAME)  # None: the section failed validation, a problem reported on its own
    if HOOKS.uses(config) and ours is not None and not ours.url and ours.server is None:
        uses = (["environment"] if config.environment == NAME else []) + [
            f"evaluation.benchmarks[{i}].environment" for i, b in enumerate(config.evaluation.benchmarks)
            if b.environment == NAME]
        issues.append(Issue(f"settings.{NAME}", f"environment {NAME} {NO_SERVER}, and the recipe sets neither "
                            f"(it names {NAME} in {', '.join(uses)})", NO_SERVER_FIX))
    if ours is not None:  # every line of the task file, before a run row
        from .environment import load_tasks

        issues += HOOKS.task_file_issues(config, ours.tasks, load_tasks, "docs/openenv.md")
    return issues + HOOKS.recipe_issues(config)


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [EnvironmentSpec(NAME, _build, "an OpenEnv environment server (reset/step/state over a WebSocket "
                                          "session or HTTP), rewarded by the environment itself", splits=_splits)]


def _splits(settings: dict[str, Any]) -> set[str] | None:
    """The task file's splits (without one: the seeds' train and eval); None where the file cannot be read
    (the environment says why when the run builds it)."""
    ours = settings.get(NAME)
    if ours is None:
        return None
    if not ours.tasks:
        return {"train", "eval"}
    from .environment import load_tasks

    try:
        return {task.split for task in load_tasks(ours.tasks)}
    except (OSError, ValueError):
        return None


@hookimpl
def register_diagnosers() -> list[DiagnoserSpec]:
    from .diagnoser import LABELS, MEANINGS, REFERENCE

    return [DiagnoserSpec(NAME, "per-turn labels from the episode record and the environment's reward (heuristic)",
                          labels=LABELS, reference=dict(REFERENCE), meanings=dict(MEANINGS), environments=(NAME,))]


@hookimpl
def end_run(ctx: Any, status: str) -> None:
    while _BUILT:
        _BUILT.pop().close()


@hookimpl
def diagnose(trajectories: list) -> list:
    """Called by the core only in runs of this plugin's environment (the diagnoser's ``environments``)."""
    from . import diagnoser

    return diagnoser.diagnose(trajectories)


@hookimpl
def evolve_interface(ctx: Any, environment: Any, interface: Any, state: Any, step: int) -> Any:
    from .evolution import evolve

    return evolve(interface, state, HOOKS.settings(ctx).evolution)
