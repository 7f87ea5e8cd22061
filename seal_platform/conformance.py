"""Does an environment plugin keep the core's contract? Checked in seconds, before a run finds out.

    from seal_platform.conformance import check_environment

    findings = check_environment("kvstore", engine="kv-oracle")   # a list of Finding
    assert not [f for f in findings if f.failed], "\\n".join(map(str, findings))

``seal-platform check-env NAME [RECIPE] [key=value ...] [--engine ENGINE] [--tasks N]`` prints the same
findings. The environment is planned and built as a run plans and builds it (:mod:`seal_platform.planning`,
:mod:`seal_platform.lifecycle`: its plugin's ``start_run`` and ``end_run`` around it, a temporary run folder,
no run store), and each check is one :class:`Finding`:

- ``plan``: the recipe (default: a minimal one naming only the environment, every stage off) plans against the
  loaded plugins: the environment is registered by one loaded plugin that implements ``collect`` and
  ``evaluate``, its settings are valid, its ``check_config`` is content;
- ``build``: the environment's factory builds an object;
- ``protocol``: it is a :class:`seal_platform.environment.Environment` (``name``, ``tasks``,
  ``pristine_interface``), naming what it lacks;
- ``tasks(SPLIT)``, for each split: a non-empty list of :class:`~seal_platform.types.Task` with unique ids;
- ``pristine_interface``: an :class:`~seal_platform.types.Interface`, revision 0, equal on a second call;
- with an engine (``engine``: a registered engine's name, a scripted one of the plugin's for a check without a
  model): ``engine`` (its factory), ``collect`` and ``evaluate``, each called twice (steps 0 and 1) on the
  first ``tasks`` tasks of the training and the evaluation split through the stage helpers the run loop
  uses (:func:`~seal_platform.stages.collect_with`, :func:`~seal_platform.stages.evaluate_with`: the count,
  ids and rewards checks a run makes, reported here as failed checks), plus what those do not check: every
  trajectory is of a task it was given, each task's rollouts are one group of their own; and ``trajectory
  ids``: no id comes back from two calls (a run stores every step and evaluation in one store, keyed by id:
  a run over several steps would stop there);
- ``verify_record``: skipped: a record's shape is the environment's own, so there is no generic record to
  score; ``seal-platform verify --benchmark NAME FILE`` tries one;
- ``lifecycle``: the plugins' ``start_run`` and ``end_run`` (and the engine's ``close``) did not fail.

Nothing here imports a plugin: the plugins are those installed (or ``host``'s).
"""

from __future__ import annotations

import json
import tempfile
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import scaleout
from .config import Issue, RunConfig, apply_overrides, raise_for, validate_core, validate_settings
from .context import RunContext
from .environment import Environment
from .errors import SealError, listed, short_repr
from .lifecycle import lifecycle
from .planning import Plan, check_recipe, load_recipe, plugin_host_for
from .plugins import PluginHost
from .recipe_keys import RecipeOrigin
from .stages import collect_with, evaluate_with, wrap
from .types import EvalResult, Interface, Task, Trajectory

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
_FAILED = object()  # what a check's call gave when it failed (its finding says why)


@dataclass(frozen=True)
class Finding:
    """One check: its name, ``PASS``, ``FAIL`` or ``SKIP``, and one paragraph saying what was found."""

    check: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASS

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def __str__(self) -> str:
        return f"{self.status} {self.check}: {self.message}"


def check_environment(
    name: str,
    *,
    recipe: str | Path | None = None,
    overrides: Sequence[str] = (),
    engine: str | None = None,
    tasks: int = 2,
    splits: Sequence[str] = ("train", "eval"),
    host: PluginHost | None = None,
) -> list[Finding]:
    """The findings of the checks (module docs) on environment ``name``, in order. ``recipe`` (a YAML path or
    a shipped recipe's name) and ``overrides`` (``key.sub=value``) set what the environment is built with
    (its plugin's settings, ``training.group_size``, ``evaluation.split``); ``environment`` is ``name`` and
    ``rollout.engine`` is ``engine`` whatever they say. Without ``engine`` no episode is run (and no engine
    built: the recipe's may load a model). ``host``: the plugins (default: those installed, as the recipe's
    ``plugins`` section selects them).

    A recipe that cannot be read, or whose core keys or overrides are wrong, raises a
    :class:`~seal_platform.errors.ConfigError` (a usage error, not a finding)."""
    if tasks < 1:
        raise SealError(f"tasks must be at least 1, not {tasks}.")
    config, source, origin = _config(name, recipe, overrides, engine)
    plan, finding = _plan(config, source, origin, host, need_engine=engine is not None)
    findings = [finding]
    if plan is None:
        return findings
    assert plan.host is not None
    _Checker(plan, plan.host, findings, tasks, splits, engine).run()
    return findings


def report_lines(findings: Sequence[Finding], width: int = 80) -> list[str]:
    """Plain-text lines of ``findings`` at most ``width`` columns wide: one line per check (its status, name
    and the start of its message); a failed check's whole message follows it, wrapped and indented."""
    lines = []
    for f in findings:
        lines += textwrap.wrap(f"{f.status}  {f.check}: {_printable(f.message)}", width, subsequent_indent=" " * 6,
                               break_long_words=True, break_on_hyphens=False)
    failed = sum(f.failed for f in findings)
    lines.append(f"{len(findings)} check(s): {failed} failed" if failed else f"{len(findings)} check(s): none failed")
    return lines


# --- planning ------------------------------------------------------------------------------------------

NO_RECIPE = "no recipe"  # the source of the config built without one
_NO_STAGES = {"evolve_interface": None, "reweight": None, "optimize": None}


def _config(name: str, recipe: str | Path | None, overrides: Sequence[str],
            engine: str | None) -> tuple[RunConfig, str, RecipeOrigin | None]:
    """The config the environment is checked with, where it came from, and (for a recipe) its origin."""
    forced = [f"environment={json.dumps(name)}", *([f"rollout.engine={json.dumps(engine)}"] if engine else [])]
    if recipe is not None:
        config, issues, path = load_recipe(recipe, [*overrides, *forced])
        if config is None:
            raise_for(issues, str(path))
        assert config is not None
        return config, str(path), RecipeOrigin(path, list(overrides))
    # No recipe: the environment alone, with every stage and diagnoser off (nothing else is planned, built
    # or checked), and two rollouts per task.
    data: dict[str, Any] = {"name": f"check-env-{name}", "environment": name, "stages": dict(_NO_STAGES),
                            "diagnosis": {"diagnosers": []}, "training": {"group_size": 2}}
    problems: list[Issue] = []
    data = apply_overrides(data, [*overrides, *forced], problems=problems)
    config, issues = validate_core(data)
    raise_for(problems + issues, "check-env")
    assert config is not None
    return config, NO_RECIPE, None


def _plan(config: RunConfig, source: str, origin: RecipeOrigin | None, host: PluginHost | None,
          need_engine: bool) -> tuple[Plan | None, Finding]:
    """The plan (:func:`~seal_platform.planning.check_recipe`), or None and the finding saying why not. Without
    an engine to run, the recipe's ``rollout.engine`` is not used, so a problem with it is none here."""
    try:
        host = host or plugin_host_for(config)
    except SealError as exc:  # a plugin the recipe's stages name is blocked or broken
        return None, Finding("plan", FAIL, f"the plugins of {source} cannot be loaded: {exc}")
    plan, issues = check_recipe(config, host)
    if not need_engine:
        issues = [issue for issue in issues if issue.where != "rollout.engine"]
    if origin is not None:
        origin.annotate(issues)
    if issues:
        listed = "; ".join(str(issue) for issue in issues)
        return None, Finding("plan", FAIL, f"the environment {config.environment!r} cannot be planned with {source} "
                             f"and the loaded plugins ({len(issues)} problem(s)): {listed}.")
    if plan is None:  # only the unused engine was wrong
        settings, _ = validate_settings(config, host.settings_models())
        plan = Plan(config, settings, host.environments()[config.environment][0], [], None)
    plan.host, plan.source = host, source
    return plan, Finding("plan", PASS, f"plugin {plan.env_owner!r}, with {Path(source).name}")


# --- the checks ----------------------------------------------------------------------------------------


class _Checker:
    """The checks of one environment, built once; each appends its findings."""

    def __init__(self, plan: Plan, host: PluginHost, findings: list[Finding], n_tasks: int,
                 splits: Sequence[str], engine: str | None):
        self.plan, self.host, self.findings = plan, host, findings
        self.owner = plan.env_owner
        self.n_tasks, self.engine = n_tasks, engine
        config = plan.config
        wanted = [*splits, *(["train", config.evaluation.split] if engine else [])]
        self.splits = list(dict.fromkeys(wanted))
        self.tasks: dict[str, list[Task]] = {}  # split -> its tasks, when they passed

    def add(self, check: str, status: str, message: str) -> None:
        self.findings.append(Finding(check, status, message))

    def run(self) -> None:
        config = self.plan.config
        participants = [self.owner]
        if self.engine is not None:
            participants.append(self.host.engines()[self.engine][0])
        participants = list(dict.fromkeys(participants))
        with tempfile.TemporaryDirectory(prefix="seal-platform-check-env-") as run_dir:
            ctx = RunContext(config=config, run_id="check-env", run_dir=Path(run_dir), settings=self.plan.settings,
                             diagnosers=list(self.plan.diagnoser_names))
            stage = "start"
            try:
                ctx.executor = scaleout.build_executor(self.host, ctx)
                # As a run: the plugins' start_run, the environment, its tasks, then the engine; end_run after.
                with lifecycle(self.host, ctx, resumed=False, plugins=participants) as life:
                    stage = "checks"
                    self.body(life, ctx)
                    stage = "end"
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                if stage == "checks":  # not a plugin's failure (each check catches those): a bug here
                    raise
                when = "start_run (or building the executor)" if stage == "start" else "end_run (or the engine's close)"
                self.add("lifecycle", FAIL, f"{when} of plugin(s) {', '.join(map(repr, participants))} failed: "
                         f"{_error(exc)}")
                return
        self.add("lifecycle", PASS, f"start_run and end_run of plugin(s) {', '.join(map(repr, participants))}")

    def body(self, life: Any, ctx: RunContext) -> None:
        env = self.attempt("build", life.environment)
        if env is _FAILED:
            return
        self.add("build", PASS, f"{type(env).__module__}.{type(env).__qualname__}")
        self.protocol(env)
        for split in self.splits:
            self.split_tasks(env, split)
        interface = self.pristine(env)
        if self.engine is None:
            self.add("episodes", SKIP, "no engine given, so collect and evaluate were not called (--engine ENGINE; "
                     "a scripted engine of the plugin needs no model)")
        else:
            self.episodes(life, ctx, env, interface)
        if callable(getattr(env, "verify_record", None)):
            self.add("verify_record", SKIP, "a record's shape is the environment's own: try records with "
                     f"`seal-platform verify --benchmark {self.plan.config.environment} FILE`")

    def attempt(self, check: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or :data:`_FAILED` with a failed ``check`` naming the error (a plugin's error is a
        PluginError by then, naming the plugin and where it was raised)."""
        try:
            return fn()
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            self.add(check, FAIL, _error(exc))
            return _FAILED

    def protocol(self, env: Any) -> None:
        kind = f"{type(env).__module__}.{type(env).__qualname__}"
        problems = []
        if not hasattr(env, "name"):
            problems.append("no `name` attribute (the environment's name, a str)")
        elif not isinstance(env.name, str) or not env.name:
            problems.append(f"a `name` that is not a non-empty str ({short_repr(env.name)})")
        for method in ("tasks", "pristine_interface"):
            if not hasattr(env, method):
                problems.append(f"no {method} method")
            elif not callable(getattr(env, method)):
                problems.append(f"a {method} that is not a method")
        if problems or not isinstance(env, Environment):
            self.add("protocol", FAIL, f"the environment object ({kind}) is not a seal_platform.environment."
                     f"Environment: it has {'; '.join(problems) or 'no match for the protocol'}. An environment "
                     "has `name`, tasks(split) -> list[Task] and pristine_interface() -> Interface.")
        else:
            self.add("protocol", PASS, f"name {env.name!r}, tasks, pristine_interface")

    def split_tasks(self, env: Any, split: str) -> None:
        check = f"tasks({split})"
        if not callable(getattr(env, "tasks", None)):
            self.add(check, SKIP, "the environment has no tasks method (see protocol)")
            return
        got = self.attempt(check, lambda: wrap("tasks", self.owner, lambda: env.tasks(split), self.host, split=split))
        if got is _FAILED:
            return
        if not isinstance(got, list):
            self.add(check, FAIL, f"tasks({split!r}) returned {type(got).__name__}, not a list of "
                     "seal_platform.types.Task.")
            return
        others = [(i, item) for i, item in enumerate(got) if not isinstance(item, Task)]
        if others:
            i, item = others[0]
            self.add(check, FAIL, f"tasks({split!r}) returned {len(others)} item(s) that are not "
                     f"seal_platform.types.Task (the first, item {i}: {type(item).__name__} {short_repr(item)}).")
            return
        if not got:
            self.add(check, FAIL, f"tasks({split!r}) returned no tasks: a run on this split would stop (a split "
                     "the environment does not have should raise, naming the splits it has).")
            return
        duplicates = [tid for tid, n in Counter(t.id for t in got).items() if n > 1]
        if duplicates:
            self.add(check, FAIL, f"tasks({split!r}) returned {len(got)} tasks with duplicate ids "
                     f"{listed(duplicates)}: a task's id must be unique within its split (trajectories, "
                     "evaluations and batches are keyed by it).")
            return
        self.tasks[split] = got
        self.add(check, PASS, f"{len(got)} task(s), ids unique")

    def pristine(self, env: Any) -> Interface | None:
        check = "pristine_interface"
        if not callable(getattr(env, "pristine_interface", None)):
            self.add(check, SKIP, "the environment has no pristine_interface method (see protocol)")
            return None
        call = lambda: wrap("environment", self.owner, env.pristine_interface, self.host)  # noqa: E731
        first = self.attempt(check, call)
        if first is _FAILED:
            return None
        if not isinstance(first, Interface):
            self.add(check, FAIL, f"pristine_interface() returned {type(first).__name__}, not a "
                     "seal_platform.types.Interface.")
            return None
        if first.revision != 0:
            self.add(check, FAIL, f"pristine_interface() returned revision {first.revision}; the pristine interface "
                     "is revision 0 (the core numbers the revisions evolve_interface proposes).")
            return None
        second = self.attempt(check, call)
        if second is _FAILED:
            return None
        if second != first:
            self.add(check, FAIL, "two calls of pristine_interface() returned different interfaces; evaluation "
                     "always uses the pristine interface, byte for byte, so it must not change.")
            return None
        self.add(check, PASS, "an Interface, revision 0, the same on a second call")
        return first

    def episodes(self, life: Any, ctx: RunContext, env: Any, interface: Interface | None) -> None:
        config = self.plan.config
        train, evaluation = self.tasks.get("train"), self.tasks.get(config.evaluation.split)
        if train is None or evaluation is None or interface is None:
            self.add("episodes", SKIP, "collect and evaluate need the tasks of the training and the evaluation "
                     "split and the pristine interface, which failed above")
            return
        engine = self.attempt("engine", life.engine)
        if engine is _FAILED:
            return
        self.add("engine", PASS, f"{self.engine!r}: {type(engine).__module__}.{type(engine).__qualname__}")
        calls: dict[str, list[Trajectory]] = {}
        collected = self.collect(ctx, env, engine, train[: self.n_tasks], interface, calls)
        evaluated = self.evaluate(ctx, env, engine, evaluation[: self.n_tasks], calls)
        if collected and evaluated:
            self.distinct_ids(calls)
        else:
            self.add("trajectory ids", SKIP, "needs collect and evaluate to pass")

    def collect(self, ctx: RunContext, env: Any, engine: Any, tasks: list[Task], interface: Interface,
                calls: dict[str, list[Trajectory]]) -> bool:
        group_size = ctx.config.training.group_size
        caller = _owned_collect(self.host, self.owner)
        for step in (0, 1):
            got = self.attempt("collect", lambda: wrap("collect", self.owner, lambda: collect_with(
                caller, ctx=ctx, environment=env, engine=engine, tasks=tasks, interface=interface,
                group_size=group_size, step=step, plugin=self.owner), self.host))  # noqa: B023 called before the loop moves on
            if got is _FAILED:
                return False
            problem = _not_of(got, tasks) or _groups(got, tasks, group_size)
            if problem:
                self.add("collect", FAIL, f"collect (step {step}) of plugin {self.owner!r} on {len(tasks)} task(s) "
                         f"x group_size {group_size}: {problem}")
                return False
            calls[f"collect at step {step}"] = got
        self.add("collect", PASS, f"steps 0 and 1: {len(tasks)} task(s) x group_size {group_size} -> {len(got)} "
                 "trajectories")
        return True

    def evaluate(self, ctx: RunContext, env: Any, engine: Any, tasks: list[Task],
                 calls: dict[str, list[Trajectory]]) -> bool:
        caller = _owned_evaluate(self.host, self.owner)
        for step in (0, 1):
            result = self.attempt("evaluate", lambda: wrap("evaluate", self.owner, lambda: evaluate_with(
                caller, ctx=ctx, environment=env, engine=engine, tasks=tasks, step=step, plugin=self.owner),  # noqa: B023 called now
                self.host))
            if result is _FAILED:
                return False
            assert isinstance(result, EvalResult)
            problem = _not_of(result.trajectories, tasks)
            if problem:
                self.add("evaluate", FAIL, f"evaluate (step {step}) of plugin {self.owner!r} on {len(tasks)} "
                         f"task(s): {problem}")
                return False
            calls[f"evaluate at step {step}"] = result.trajectories
        self.add("evaluate", PASS, f"steps 0 and 1: {len(tasks)} task(s) of {ctx.config.evaluation.split!r} -> "
                 f"{len(result.trajectories)} trajectories")
        return True

    def distinct_ids(self, calls: dict[str, list[Trajectory]]) -> None:
        seen: dict[str, str] = {}
        repeated: list[str] = []
        for call, trajectories in calls.items():
            for t in trajectories:
                if t.id in seen and seen[t.id] != call:
                    repeated.append(f"{t.id!r} ({seen[t.id]} and {call})")
                seen.setdefault(t.id, call)
        if repeated:
            self.add("trajectory ids", FAIL, f"plugin {self.owner!r} returned the same trajectory id from two calls: "
                     f"{listed(repeated, quote=False)}. A run stores every step's and evaluation's trajectories "
                     "in one store, keyed by id, and refuses a repeated one: leave Trajectory.id at its default, "
                     "a fresh uuid4 (an id built from the task and sample repeats).")
        else:
            self.add("trajectory ids", PASS, f"{len(seen)} ids, none in two of the {len(calls)} calls")


def _owned_collect(host: PluginHost, owner: str) -> Callable[..., Any]:
    """``collect`` of plugin ``owner``, as :func:`~seal_platform.stages.collect_with` calls a hook
    implementation (every argument by name) and the run loop calls the hook (on its owner only)."""
    def collect(ctx: Any, environment: Any, engine: Any, tasks: Any, interface: Any, group_size: Any, step: Any,
                sampling: Any) -> Any:
        return host.call_owned("collect", owner, ctx=ctx, environment=environment, engine=engine, tasks=tasks,
                               interface=interface, group_size=group_size, step=step, sampling=sampling)
    return collect


def _owned_evaluate(host: PluginHost, owner: str) -> Callable[..., Any]:
    """``evaluate`` of plugin ``owner``, as :func:`_owned_collect` for ``collect``."""
    def evaluate(ctx: Any, environment: Any, engine: Any, tasks: Any, step: Any, sampling: Any) -> Any:
        return host.call_owned("evaluate", owner, ctx=ctx, environment=environment, engine=engine, tasks=tasks,
                               step=step, sampling=sampling, interface=None)
    return evaluate


def _not_of(trajectories: list[Trajectory], tasks: list[Task]) -> str | None:
    """What is wrong when some of ``trajectories`` are not of ``tasks`` (by ``task_id``), else None."""
    given = {t.id for t in tasks}
    strays = sorted({t.task_id for t in trajectories if t.task_id not in given})
    if strays:
        return (f"trajectories of task(s) {listed(strays)}, which it was not given (given: "
                f"{listed(sorted(given))}); a trajectory's task_id is the id of the task it ran.")
    return None  # count, ids and rewards: the stage helpers' checks


def _groups(trajectories: list[Trajectory], tasks: list[Task], group_size: int) -> str | None:
    """What is wrong with the rollouts of ``tasks`` when they are not ``group_size`` per task, each task's in
    one ``group`` of its own (GRPO compares the rollouts of a group), else None."""
    counts = Counter(t.task_id for t in trajectories)
    uneven = [f"{tid!r}: {counts.get(tid, 0)}" for tid in (t.id for t in tasks) if counts.get(tid, 0) != group_size]
    if uneven:
        return (f"not {group_size} rollout(s) per task: {listed(uneven, quote=False)}; "
                "collect returns group_size rollouts of every task it is given.")
    groups: dict[str, set[str]] = {}
    for t in trajectories:
        groups.setdefault(t.task_id, set()).add(t.group)
    split = {tid: sorted(g) for tid, g in groups.items() if len(g) > 1}
    if split:
        tid, names = next(iter(split.items()))
        return (f"the rollouts of task {tid!r} are in {len(names)} groups ({listed(names)}); the rollouts of one "
                "task share Trajectory.group.")
    owners = Counter(next(iter(g)) for g in groups.values())
    shared = [name for name, n in owners.items() if n > 1]
    if shared:
        return (f"group(s) {listed(shared)} hold the rollouts of several tasks; each task's rollouts are a group "
                "of their own (GRPO compares the rewards within a group).")
    return None


# --- text ----------------------------------------------------------------------------------------------

def _printable(text: str) -> str:
    """A plugin's text on one line, with control and bidi characters shown, not obeyed (:func:`.present.safe.clean`)."""
    from .present.safe import clean

    return clean(text.replace("\n", " ").replace("\t", " "))


def _error(exc: BaseException) -> str:
    """An error as a finding says it: a platform error's own sentence, else its type and text."""
    return str(exc) if isinstance(exc, SealError) else f"{type(exc).__name__}: {exc}"
