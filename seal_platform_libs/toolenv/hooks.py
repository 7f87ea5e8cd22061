"""The hook implementations that tool-environment plugins write alike, written once: an environment plugin
whose environment plays its episodes in lock step (:mod:`.lockstep`) makes one :class:`LockstepHooks` and
exports the hooks it wants from its plugin module (pluggy reads a module's attributes, so a bound method marked
``@hookimpl`` is a hook implementation like a function)::

    HOOKS = LockstepHooks(NAME, _settings_model, batches="...", fix="...")
    register_settings, collect, evaluate = HOOKS.register_settings, HOOKS.collect, HOOKS.evaluate

The core calls ``collect`` and ``evaluate`` on the plugin that registered the run's environment only (and a
benchmark's on its environment's plugin), so these never see another plugin's environment. The plugin's
``evolve_interface`` is called when the recipe names the plugin under ``stages.evolve_interface``, whatever
the environment: :meth:`LockstepHooks.recipe_issues` refuses a recipe that names it for another environment.

The environment object gives ``settings`` (with ``max_new_tokens``), ``pristine_interface()`` and
``play(engine, episodes, interface, sampling)`` (:class:`PlayingEnvironment`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from seal_platform.config import Issue, RunConfig
from seal_platform.hookspecs import hookimpl
from seal_platform.types import EvalResult, Interface, SamplingParams, Task, Trajectory

from .episodes import (
    Episode,
    evaluation_episodes,
    lockstep_executor_issues,
    scored_without_infra_failures,
    tool_call_sampling,
    training_episodes,
)


class PlayingEnvironment(Protocol):
    """What the standard hooks need of an environment."""

    settings: Any  # the plugin's settings section; ``max_new_tokens``: the token limit of one agent message

    def pristine_interface(self) -> Interface: ...

    def play(self, engine: Any, episodes: list[Episode], interface: Interface,
             sampling: SamplingParams) -> list[Trajectory]: ...


class LockstepHooks:
    """The standard hooks of the tool-environment plugin ``name`` (also its environment's and its settings
    section's name); ``settings_model``: returns the section's pydantic model (imported when called, so that
    loading the plugin module stays cheap). ``batches`` and ``fix``: how the episodes are batched and what to
    do instead of naming an executor (see :func:`.episodes.lockstep_executor_issues`)."""

    def __init__(self, name: str, settings_model: Callable[[], type], *, batches: str, fix: str) -> None:
        self.name = name
        self.settings_model = settings_model
        self.batches = batches
        self.fix = fix

    def settings(self, ctx: Any) -> Any:
        """The run's validated settings section of this plugin."""
        return ctx.settings_for(self.name, self.settings_model())

    def uses(self, config: RunConfig) -> bool:
        """Whether the recipe trains or evaluates on this environment."""
        return config.environment == self.name or any(b.environment == self.name for b in config.evaluation.benchmarks)

    def recipe_issues(self, config: RunConfig) -> list[Issue]:
        """For ``check_config``: an executor the lock-step episodes would leave unused, and a
        ``stages.evolve_interface`` that names this plugin for another environment (its revisions are written
        for this environment's episodes only)."""
        issues = lockstep_executor_issues(config, self.name, self.batches, self.fix)
        if config.stages.evolve_interface == self.name and config.environment != self.name:
            issues.append(
                Issue(
                    "stages.evolve_interface",
                    f"plugin {self.name!r} evolves the interface of environment {self.name!r} only, and the "
                    f"recipe trains on {config.environment!r}",
                    "name the plugin of the recipe's environment (`seal-platform plugins` lists them), or "
                    "null to switch the stage off",
                )
            )
        return issues

    def task_file_issues(self, config: RunConfig, path: str | None, load_tasks: Callable[[str], Sequence[Task]],
                         doc: str) -> list[Issue]:
        """For ``check_config`` of a recipe that uses this environment with a task file at ``path``: every line
        of the file is a valid task (``load_tasks`` raises OSError or ValueError otherwise, with the file and
        line); ``doc``: the page that describes the file."""
        if not self.uses(config) or not path:
            return []
        try:
            load_tasks(path)
        except (OSError, ValueError) as exc:
            return [Issue(f"settings.{self.name}.tasks", str(exc).rstrip("."), f"give the JSON Lines task file "
                          f"described in {doc} (relative paths are read from the current directory)")]
        return []

    @hookimpl
    def register_settings(self) -> dict[str, type]:
        return {self.name: self.settings_model()}

    @hookimpl
    def collect(self, ctx: Any, environment: PlayingEnvironment, engine: Any, tasks: list[Task], interface: Interface,
                group_size: int, step: int) -> list[Trajectory]:
        """``group_size`` episodes of each task under the training interface, sampled as the run says."""
        return environment.play(engine, training_episodes(tasks, group_size, step), interface,
                                tool_call_sampling(ctx, False, environment.settings.max_new_tokens))

    def evaluation_trajectories(self, ctx: Any, environment: PlayingEnvironment, engine: Any, tasks: list[Task],
                                step: int, interface: Interface | None = None) -> list[Trajectory]:
        """One greedy episode of each held-out task under ``interface`` (None: the pristine one)."""
        return environment.play(engine, evaluation_episodes(tasks, step), interface or environment.pristine_interface(),
                                tool_call_sampling(ctx, True, environment.settings.max_new_tokens))

    @hookimpl
    def evaluate(self, ctx: Any, environment: PlayingEnvironment, engine: Any, tasks: list[Task],
                 step: int) -> EvalResult:
        """Greedy episodes on the pristine interface, scored without the ones lost to the infrastructure."""
        return scored_without_infra_failures(ctx, tasks, self.evaluation_trajectories(ctx, environment, engine, tasks,
                                                                                      step))
