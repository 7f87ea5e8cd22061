"""Planning: a recipe resolved against the loaded plugins, before anything runs.

    recipe (YAML + key=value overrides) --load_recipe--> RunConfig --plugin_host_for--> PluginHost
        --check_recipe / prepare--> Plan --(seal_platform.loop.Runner)--> a run

Everything that can be checked before a run starts is checked here and reported together: the core recipe
keys, each plugin's settings section, that the recipe's environment, rollout engine, stage owners and
diagnosers are registered by loaded plugins that implement what they must. The CLI (``run``, ``config
validate``, ``eval``) and the tests go through these functions and :func:`plan_recipe`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from . import scaleout
from .benchmarks import check_benchmarks
from .config import (
    Issue,
    RunConfig,
    apply_overrides,
    hint_settings_sections,
    load_recipe_data,
    raise_for,
    resolve_recipe_path,
    salvage_config,
    validate_core,
    validate_settings,
)
from .errors import ConfigError, PluginError, SealError
from .plugins import PluginHost, make_plugin_manager, short_repr
from .recipe_keys import RecipeOrigin, close_key


@dataclass
class Plan:
    """What a validated recipe resolves to against the loaded plugins."""

    config: RunConfig
    settings: dict[str, BaseModel]
    env_owner: str
    diagnosers: list[str]  # plugin names whose `diagnose` is called
    primary_diagnoser: str | None
    host: PluginHost | None = None  # set by prepare(): the plugins the plan was checked against
    source: str = ""  # the recipe file (or run id) the plan came from, for messages and the store
    # The diagnosers the run enables (names; those that label its environment), handed to plugins as ctx.diagnosers.
    diagnoser_names: list[str] = field(default_factory=list)


def load_recipe(recipe: str | Path | None, overrides: Sequence[str] = ()) -> tuple[RunConfig | None, list[Issue], Path]:
    """Read a recipe (a YAML path, a shipped recipe's name, or None for the default), apply ``key=value``
    overrides and check the core keys. Returns the config (None if the core keys are wrong), the problems
    found (each naming its source: the recipe file and line, or the override) and the resolved path."""
    path = resolve_recipe_path(None if recipe is None else str(recipe))
    bad_overrides: list[Issue] = []  # each a problem of its own; the recipe is checked with the others
    data = apply_overrides(load_recipe_data(path), list(overrides), problems=bad_overrides)
    config, issues = validate_core(data)
    if bad_overrides:
        config = None
    return config, bad_overrides + RecipeOrigin(path, list(overrides)).annotate(issues), path


def recipe_problems(
    recipe: str | Path | None, overrides: Sequence[str] = (), on_host: Callable[[PluginHost], None] | None = None,
) -> tuple[RunConfig | None, list[Issue], Path]:
    """:func:`load_recipe`, then every other problem of the recipe at once: plugin settings, environment,
    engine and stages -- also when core keys are wrong (the rest is checked with the bad keys left out).
    ``config validate`` and ``run`` both report what this finds, so they refuse the same recipes alike.
    ``on_host`` is given the plugin host the recipe was checked with (``config validate`` names the plugins
    that failed to load from it), when one could be built."""
    config, issues, path = load_recipe(recipe, overrides)
    data = None if config is not None else apply_overrides(load_recipe_data(path), list(overrides), problems=[])
    checked = config or salvage_config(data or {})  # salvage_config changes a copy, never ``data``
    if checked is not None:
        try:
            host = plugin_host_for(checked)
        except PluginError as exc:
            issues.append(Issue("plugins", str(exc)))
        else:
            if on_host is not None:
                on_host(host)
            if data is not None:  # `grpo.lr=...` for `settings.grpo.lr=...`: named as such
                hint_settings_sections(issues, data, host.settings_models())
            issues.extend(check_recipe(checked, host)[1])
    RecipeOrigin(path, list(overrides)).annotate(issues)  # each problem names its file line or override
    return (config if not issues else None), issues, path


def plugin_host_for(config: RunConfig | None) -> PluginHost:
    """The plugin manager for a recipe: its ``plugins.allow``/``block`` applied, the plugins it names required."""
    if config is None:
        return make_plugin_manager()
    return make_plugin_manager(
        allow=config.plugins.allow, block=config.plugins.block, required=config.named_plugins()
    )


def check_recipe(config: RunConfig, host: PluginHost) -> tuple[Plan | None, list[Issue]]:
    """Everything that can be checked before a run starts, reported together."""
    settings, issues = validate_settings(config, host.settings_models())
    shared_sections = host.clashes("settings")
    for issue in issues:
        if issue.what == "no loaded plugin owns this section":
            section = issue.where.removeprefix("settings.")
            if section in shared_sections:  # owned by several plugins, not by none
                issue.what, issue.fix = host.clash_problem("settings", section) or (issue.what, issue.fix)
            else:
                issue.fix = _with_failures(issue.fix, host)
    if problem := host.missing("environment", config.environment):
        issues.append(Issue("environment", *problem))
        env_owner = ""
    else:
        env_owner = host.environments()[config.environment][0]
        for hook in ("collect", "evaluate"):
            if not host.implements(env_owner, hook):
                issues.append(
                    Issue(
                        "environment",
                        f"plugin {env_owner!r} registers {config.environment!r} but does not implement {hook!r}",
                    )
                )
        if (config.evaluation.training_interface and host.implements(env_owner, "evaluate")
                and not host.takes(env_owner, "evaluate", "interface")):
            issues.append(Issue("evaluation.training_interface",
                                f"plugin {env_owner!r} evaluates {config.environment!r} on its pristine interface only "
                                "(its 'evaluate' takes no 'interface' argument)",
                                "set evaluation.training_interface to false, or evaluate on the interface the core "
                                "passes (docs/hooks.md, 'evaluate')"))
    if config.rollout.engine is None:
        engines = sorted(host.engines())
        issues.append(Issue("rollout.engine", "not set: a run needs a rollout engine (it loads the policy and "
                            "generates every rollout and evaluation), and the recipe names none",
                            f"set rollout.engine to one of the registered engines: {', '.join(engines) or 'none'}"
                            + (f" (e.g. rollout.engine={engines[0]})" if engines else "")))
    elif problem := host.missing("engine", config.rollout.engine):
        issues.append(Issue("rollout.engine", *problem))
    for stage, owner in config.stages.model_dump().items():
        if owner is None:
            continue
        if not host.is_loaded(owner):
            issues.append(
                Issue(
                    f"stages.{stage}",
                    host.why_missing(owner),
                    "name a loaded plugin (see `seal-platform plugins`; stages name plugins, not environments or "
                    "diagnosers) or null to switch the stage off",
                )
            )
        elif not host.implements(owner, stage):
            issues.append(
                Issue(f"stages.{stage}", f"plugin {owner!r} does not implement {stage!r}", "name a plugin that does")
            )
        elif stage == "optimize" and config.rollout.overlap and not host.takes(owner, stage, "rollouts"):
            issues.append(Issue("rollout.overlap", f"the optimizer {owner!r} cannot run with overlapped rollouts: its "
                                "'optimize' does not take `rollouts`, so it could change the engine's weights while "
                                "the next step's episodes sample from it", "set rollout.overlap: false, or name an "
                                "optimizer whose optimize waits for `rollouts` (grpo does)"))
    registered = host.diagnosers()
    named = config.diagnosis.diagnosers
    if named is not None:
        enabled = named
    else:  # every one that is not explicit; one that several plugins register is a problem if it would run
        shared = [n for n, owners in host.clashes("diagnosers").items()
                  if any(not spec.explicit and spec.labels_environment(config.environment) for _, spec in owners)]
        enabled = sorted([*(n for n, (_, spec) in registered.items() if not spec.explicit), *shared])
    for name in enabled:
        if problem := host.missing("diagnoser", name):
            what, fix = problem
            if named is None:  # the recipe did not name it: it would run as one of every non-explicit diagnoser
                fix = f"{fix}; or list the diagnosers to run in diagnosis.diagnosers (null enables every one)"
            issues.append(Issue("diagnosis.diagnosers", what, fix))
    # Those that label this environment run. One enabled by default (diagnosis.diagnosers null) that does not
    # is left out; one the recipe names is a problem: it would be left out, and label nothing, without a word.
    active = [n for n in enabled if n in registered and registered[n][1].labels_environment(config.environment)]
    unlabelled = [name for name in dict.fromkeys(named or ()) if name in registered and name not in active]
    for name in unlabelled:
        issues.append(Issue("diagnosis.diagnosers", _unlabelled(name, registered[name], config.environment, host),
                            "remove it from diagnosis.diagnosers, or name a diagnoser of this environment "
                            f"(`seal-platform labels {config.environment}` lists them)"))
    # No labels at all for stages that work from them (each diagnoser enabled by default labels other
    # environments, a DiagnoserSpec's environments misspelt, or none enabled): said once, unless said above.
    needing = [f"stages.{stage}" for stage in _NEEDS_LABELS if getattr(config.stages, stage)]
    if needing and not active and not unlabelled and all(n in registered for n in enabled):
        issues.append(_no_labels(config, host, needing, enabled, registered))
    diagnoser_plugins = sorted({registered[n][0] for n in active})
    for plugin in diagnoser_plugins:
        if not host.implements(plugin, "diagnose"):
            issues.append(
                Issue(
                    "diagnosis.diagnosers", f"plugin {plugin!r} registers a diagnoser but does not implement 'diagnose'"
                )
            )
    primary = config.diagnosis.primary
    if primary is None:
        # A diagnoser of the environment's own plugin knows its verifier trace best; else the first enabled one.
        own = [n for n in active if registered[n][0] == env_owner]
        primary = own[0] if own else (active[0] if active else None)
    elif primary in enabled and primary in registered and primary not in active:
        issues.append(Issue("diagnosis.primary", _unlabelled(primary, registered[primary], config.environment, host)
                            + ", so the run would have no primary labels",
                            "name a diagnoser of this environment (`seal-platform labels` lists them), or null"))
    elif primary not in enabled:
        meant = close_key(primary, sorted(registered)) if primary not in registered else None
        guess = f"did you mean {meant!r}? " if meant else ""
        issues.append(
            Issue(
                "diagnosis.primary",
                f"diagnoser {primary!r} is not enabled",
                _with_failures(
                    f"{guess}add it to diagnosis.diagnosers (diagnoser names, as `seal-platform plugins` lists them)",
                    host,
                )
                if primary not in registered
                else "add it to diagnosis.diagnosers",
            )
        )
    issues.extend(_shared_clusters(config, host, settings))
    issues.extend(scaleout.check(config, host, settings))
    issues.extend(_plugin_checks(config, host, settings))
    issues += check_benchmarks(config, host)
    issues += _split_issues(config, host, settings)
    if issues:
        return None, issues
    return Plan(config, settings, env_owner, diagnoser_plugins, primary, diagnoser_names=active), []


def _split_issues(config: RunConfig, host: PluginHost, settings: dict[str, Any]) -> list[Issue]:
    """The splits the recipe asks of its environments (``train`` and ``evaluation.split`` of the run's, each
    benchmark's ``split``) that an environment declaring its splits (``EnvironmentSpec.splits``) does not
    have; an environment that declares none is left to refuse the split when the run lists its tasks."""
    environments = host.environments()
    wanted = [
        (config.environment, "train", "environment"),
        (config.environment, config.evaluation.split, "evaluation.split"),
    ]
    wanted += [(bench.environment, bench.split, f"evaluation.benchmarks[{i}].split")
               for i, bench in enumerate(config.evaluation.benchmarks)]
    declared: dict[str, list[str] | Issue | None] = {}
    issues = []
    for environment, split, where in wanted:
        if environment not in environments:
            continue  # one that no plugin (or more than one) registers is a problem of its own
        owner, spec = environments[environment]
        if environment not in declared:
            try:
                declared[environment] = spec.declared_splits(settings)
            except SealError as exc:  # the data it reads (a task file) is the user's to fix: said as it is
                problem = Issue(where, f"environment {environment!r}: {str(exc).rstrip('.')}")
                declared[environment] = problem
                issues.append(problem)
            except Exception as exc:  # a plugin's bug: named, with the rest of the recipe's problems
                failed = Issue(where, f"plugin {owner!r} failed listing the splits of environment {environment!r}: "
                                      f"{type(exc).__name__}: {exc}",
                               "fix the plugin's EnvironmentSpec.splits, or block the plugin (plugins.block)")
                declared[environment] = failed
                issues.append(failed)
        splits = declared[environment]
        if not isinstance(splits, list) or split in splits:
            continue
        named = f"environment {environment!r}" + (f" (plugin {owner!r})" if owner != environment else "")
        has = f"its splits: {', '.join(splits)}" if splits else "it declares no split"
        if where == "environment":  # a run lists its training tasks from `train`, whatever the recipe says
            issues.append(Issue(where, f"{named} has no 'train' split to train on; {has}",
                                "train on an environment that has one (a task file gives each task's split)"))
        else:
            issues.append(Issue(where, f"{named} has no split {split!r}; {has}",
                                f"set {where} to one of them" if splits else "check the environment's settings"))
    return issues


# The stages that work from the diagnosers' labels: interface evolution (the capability state) and A-Patch.
_NEEDS_LABELS = ("evolve_interface", "reweight")


def _unlabelled(name: str, registration: tuple[str, Any], environment: str, host: PluginHost) -> str:
    """That diagnoser ``name`` (``registration``: its plugin and spec) does not label ``environment``, with
    the environments it labels (and, for one that no loaded plugin registers, the one it may have meant)."""
    plugin, spec = registration
    return f"diagnoser {name!r} does not label environment {environment!r} (it labels: " \
        f"{_labelled(spec.environments, environment, host)}; registered by plugin {plugin!r})"


def _labelled(environments: Sequence[str], environment: str, host: PluginHost) -> str:
    """A diagnoser's ``environments``, each that no loaded plugin registers said so (a typo in its
    DiagnoserSpec, like ``libary``, would leave it out of every run of ``environment``)."""
    known = host.environments()
    said = []
    for env in environments:
        if env in known:
            said.append(env)
        else:
            meant = close_key(env, [environment]) or close_key(env, sorted(known))
            said.append(f"{env} (registered by no loaded plugin{f'; {meant!r} meant?' if meant else ''})")
    return ", ".join(said)


def _no_labels(config: RunConfig, host: PluginHost, needing: list[str], enabled: Sequence[str],
               registered: dict[str, tuple[str, Any]]) -> Issue:
    """The problem of a recipe whose stages ``needing`` work from labels that no enabled diagnoser gives
    for its environment: the enabled ones that label others are named, with the environments they label."""
    others = [
        f"{name} (plugin {registered[name][0]!r}) labels only "
        f"{_labelled(registered[name][1].environments, config.environment, host)}"
        for name in enabled
        if name in registered
    ]
    said = f"; enabled: {'; '.join(others)}" if others else ""
    return Issue("diagnosis.diagnosers", f"no enabled diagnoser labels environment {config.environment!r}, so "
                 f"{' and '.join(needing)} would have no labels to work from{said}",
                 f"enable a diagnoser of this environment (`seal-platform labels {config.environment}` lists them), "
                 f"or switch the stage(s) off ({', '.join(f'{stage}: null' for stage in needing)})")


def _shared_clusters(config: RunConfig, host: PluginHost, settings: dict[str, Any]) -> list[Issue]:
    """A cluster name several plugins register is a problem for a recipe that enables one of them (the
    registry leaves it out, so the run would go on without it)."""
    issues = []
    for name, owners in sorted(host.clashes("clusters").items()):
        try:
            enabled = any(spec.factory(config, settings) is not None for _, spec in owners)
        except Exception:  # a factory failing on this recipe: the registry's own check says so, if it is used
            enabled = True
        problem = host.clash_problem("clusters", name)
        if enabled and problem is not None:
            issues.append(Issue("settings", *problem))
    return issues


def _plugin_checks(config: RunConfig, host: PluginHost, settings: dict[str, Any]) -> list[Issue]:
    """The enabled plugins' own recipe checks (the ``check_config`` hook), given the recipe's cluster."""
    try:
        cluster = scaleout.cluster_for(host, config, settings)
    except ConfigError as exc:
        return [Issue("settings", str(exc))]
    issues: list[Issue] = []
    for plugin, answer in _answers(host, "check_config", config=config, settings=settings, cluster=cluster):
        if isinstance(answer, Issue):  # the plugin failed: its failure is the problem
            issues.append(answer)
        elif (items := _list_of(answer, Issue)) is None:
            issues.append(
                Issue(
                    "plugins",
                    f"plugin {plugin!r} returned {short_repr(answer)} from 'check_config', not a "
                    "list of seal_platform.config.Issue",
                    "fix or block the plugin (plugins.block); the hook specs: seal_platform/hookspecs.py",
                )
            )
        else:
            issues.extend(items)
    return issues


def _answers(host: PluginHost, hook: str, **kwargs: Any) -> list[tuple[str, Any]]:
    """(plugin, answer) of every plugin implementing ``hook`` (a check hook), each called on its own; the
    answer of one that raised is an :class:`Issue` naming it and its error."""
    def failed(plugin: str, exc: Exception) -> Issue:
        return Issue("plugins", f"plugin {plugin!r} failed in {hook!r}: {type(exc).__name__}: {exc}",
                     "fix or block the plugin (plugins.block)")

    return host.call_per_plugin(hook, failed=failed, **kwargs)


def _list_of(answer: Any, kind: type) -> list[Any] | None:
    """``answer`` (a check hook's) as a list of ``kind`` (None: an empty one), or None when it is anything else."""
    if answer is None:
        return []
    if not isinstance(answer, (list, tuple)) or not all(isinstance(item, kind) for item in answer):
        return None
    return list(answer)


def _with_failures(hint: str, host: PluginHost) -> str:
    """``hint`` plus the plugins that failed to load, with their errors: one of them may be the provider."""
    note = host.failure_note()
    return f"{hint}; {note}" if note else hint


def prepare(config: RunConfig, host: PluginHost, source: str, origin: RecipeOrigin | None = None) -> Plan:
    """The plan for ``config`` against ``host``; every problem found raises one :class:`ConfigError` (each
    problem naming its source in ``origin``, the recipe file and overrides, when given)."""
    plan, issues = check_recipe(config, host)
    if origin is not None:
        origin.annotate(issues)
    raise_for(issues, source)
    assert plan is not None
    plan.host = host
    plan.source = source
    return plan


def check_machine(plan: Plan, host: PluginHost | None = None) -> None:
    """Ask every enabled plugin whether this machine can run ``plan`` (the ``check_machine`` hook); raise one
    :class:`SealError` with all their problems, before anything is loaded or written."""
    host = host or plan.host
    if host is None:
        return
    cluster = scaleout.cluster_for(host, plan.config, plan.settings)
    problems: list[str] = []
    for plugin, answer in _answers(host, "check_machine", config=plan.config, settings=plan.settings, cluster=cluster):
        if isinstance(answer, Issue):  # the plugin failed: its failure is the problem
            problems.append(f"{answer.what} ({answer.fix})")
        elif (items := _list_of(answer, str)) is None:
            problems.append(
                f"plugin {plugin!r} returned {short_repr(answer)} from 'check_machine', not a list of "
                "strings (the hook specs: seal_platform/hookspecs.py); fix or block the plugin (plugins.block)"
            )
        else:
            problems.extend(items)
    if problems:
        raise SealError("this machine cannot run the recipe as written; nothing was started.\n" + "\n".join(
            f"- {problem}" for problem in problems))


def plan_config(config: RunConfig, source: str, origin: RecipeOrigin | None = None,
                host: PluginHost | None = None) -> Plan:
    """A checked config -> its plugins -> its plan (raises on any problem, naming ``source``). ``host``: the
    plugins the config was just checked with (``recipe_problems``' ``on_host``), so that a command loads its
    plugins, and calls their registration hooks, once; None: loaded here."""
    return prepare(config, host or plugin_host_for(config), source, origin)


def plan_recipe(recipe: str | Path | None = None, overrides: Sequence[str] = ()) -> Plan:
    """recipe -> plan in one call: read the recipe, load its plugins, check everything; raise on any problem.

    Run the plan with :func:`seal_platform.loop.run_plan` (or build a :class:`seal_platform.loop.Runner`).
    """
    config, issues, path = load_recipe(recipe, overrides)
    if config is None:
        raise_for(issues, str(path))
    assert config is not None
    return plan_config(config, str(path), RecipeOrigin(path, list(overrides)))


def new_run_config(recipe: str | None, overrides: list[str],
                   store_url: str | None) -> tuple[RunConfig, str, RecipeOrigin, PluginHost | None]:
    """A new run's config, checked (every problem of the recipe at once, raised), its recipe's path, where its
    problems come from, and the plugin host it was checked with. ``store_url``, when given, replaces the
    recipe's store."""
    checked_with: list[Any] = []
    loaded, issues, path = recipe_problems(recipe, overrides, on_host=checked_with.append)
    if loaded is None:
        raise_for(issues, str(path))
    assert loaded is not None
    config = loaded.model_copy(update={"store": store_url}) if store_url else loaded
    return config, str(path), RecipeOrigin(path, overrides), checked_with[0] if checked_with else None
