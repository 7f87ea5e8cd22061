"""What the core fills in around the stage hooks, said and provided once.

* Sampling: ``collect`` gets the recipe's rollout sampling (``rollout.temperature``, ``top_p``,
  ``max_new_tokens``); ``evaluate`` gets greedy decoding (temperature 0, top-p 1) with
  ``evaluation.max_new_tokens`` (default: ``rollout.max_new_tokens``). Environments add only what is theirs
  (stop strings, per-rollout seeds) with ``sampling.model_copy(update=...)``; an environment with a cap of
  its own on new tokens builds its sampling with :func:`sampling_for` (the same rule, its cap in it).
* Scoring: ``evaluate`` returns the verified trajectories (one per task); the core turns them into the
  pass rate per category (:meth:`seal_platform.types.EvalResult.from_trajectories`).
* Checks: what ``collect`` and ``evaluate`` return is checked before anything of it is used or stored
  (:func:`check_trajectories`, :func:`check_ids_unused`, :func:`score_evaluation`): one trajectory per task
  (and sample), ids unique across the run store, finite rewards. What a diagnoser returns is checked by
  :func:`checked_labels`. A failure is a :class:`PluginError` naming the plugin and the hook.
* Interface revisions: the core sets ``revision``, ``parent`` and ``step`` of what ``evolve_interface`` returns.

:func:`collect_with` and :func:`evaluate_with` call a hook implementation exactly as the run loop does
(arguments it names, sampling filled in, result checked and scored), for a plugin's own tests.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Callable, Sequence
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

from .config import RunConfig
from .errors import PluginError, SealError, finite_reward, listed
from .interrupts import raise_if_interrupted
from .types import EvalResult, Interface, SamplingParams, Task, Trajectory, TurnLabel

if TYPE_CHECKING:  # pragma: no cover
    from .store import RunStore


def wrap(stage: str, plugin: str, fn: Callable[[], Any], host: Any = None, *, split: str | None = None) -> Any:
    """``fn()``; anything it raises other than a :class:`SealError` becomes a :class:`PluginError` naming the
    stage and the plugin (a plugin's bug is reported as one, with its cause) and where it was raised (the
    innermost frame's file:line). With the plugin ``host``, an error raised in the code of another plugin
    (an environment's ``evaluate`` calling the engine of another plugin, whose ``generate`` failed) names that
    plugin too (:func:`stage_failure`). A Ctrl-C that a library swallowed during the call stops the run when
    it returns (:func:`~seal_platform.interrupts.raise_if_interrupted`). A ``sys.exit`` in the plugin's code is its
    failure too (a KeyboardInterrupt is not).

    ``stage`` is a stage hook's name (``collect``, ``evaluate``, ...) or a set-up step of :data:`SETUP_STEPS`
    (``tasks``, ``environment``, ``engine``), which the message calls by what it is, not a stage; ``split``
    (with ``tasks``) names the split being listed."""
    try:
        result = fn()
        raise_if_interrupted()
        return result
    except SealError:
        raise
    except (Exception, SystemExit) as exc:  # a plugin calling sys.exit fails its stage; it does not end the run
        raise PluginError(stage_failure(stage, plugin, exc, host, split=split)) from exc


def call_stage(host: Any, hook: str, owner: str, **kwargs: Any) -> Any:
    """The stage hook ``hook`` of its ``owner`` plugin only (``host.call_owned``), under :func:`wrap`."""
    return wrap(hook, owner, lambda: host.call_owned(hook, owner, **kwargs), host)


# Calls :func:`wrap` guards that are not stages: what the message says instead of "the 'X' stage".
SETUP_STEPS = {
    "tasks": "listing the tasks",
    "environment": "setting up the environment",
    "engine": "building the rollout engine",
}


def _failing(stage: str, split: str | None) -> str:
    """What failed, as the subject of the message: "the 'collect' stage", "listing the tasks of split 'eval'"."""
    doing = SETUP_STEPS.get(stage)
    if doing is None:
        return f"the {stage!r} stage"
    return f"{doing} of split {split!r}" if stage == "tasks" and split is not None else doing


class _Frame(NamedTuple):
    module: str
    file: str
    line: int
    function: str


def _frames(tb: TracebackType | None) -> list[_Frame]:
    """The frames of a traceback, outermost first."""
    frames = []
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append(_Frame(str(tb.tb_frame.f_globals.get("__name__", "")), code.co_filename, tb.tb_lineno,
                             code.co_name))
        tb = tb.tb_next
    return frames


def plugin_modules(host: Any) -> dict[str, str]:
    """Plugin name -> the module its hook implementations are in, for every plugin registered with ``host``
    (a :class:`~seal_platform.plugins.PluginHost`): a module plugin's own name, an object's class's module."""
    modules: dict[str, str] = {}
    for name, obj in host.pm.list_name_plugin():
        if obj is None:  # blocked
            continue
        module = obj.__name__ if isinstance(obj, ModuleType) else getattr(
            obj if isinstance(obj, type) else type(obj), "__module__", None)
        if isinstance(module, str) and module:
            modules[name] = module
    return modules


def plugin_of_module(module: str, modules: dict[str, str], prefer: str = "") -> str | None:
    """The plugin whose code ``module`` is: the plugin registered as that module, else the one whose module's
    package holds it (``seal_platform_plugins.grpo.trainer`` is ``grpo``'s, registered as
    ``seal_platform_plugins.grpo.plugin``), the deepest package first; ``prefer`` (the stage's owner) wins a
    tie, and a tie without it, the core's own package, or a library (``seal_platform_libs``, which no plugin
    registers as), is no plugin's (None)."""
    exact = [name for name, mod in modules.items() if mod == module]
    if exact:
        return prefer if prefer in exact else exact[0]
    packages = {name: mod.rpartition(".")[0] for name, mod in modules.items()}
    within = [name for name, package in packages.items()
              if package and package != "seal_platform" and module.startswith(package + ".")]
    if not within:
        return None
    deepest = max(len(packages[name]) for name in within)
    within = [name for name in within if len(packages[name]) == deepest]
    if prefer in within:
        return prefer
    return within[0] if len(within) == 1 else None


def stage_failure(stage: str, plugin: str, exc: BaseException, host: Any = None, *, split: str | None = None) -> str:
    """The message for ``exc`` raised by the ``stage`` call of ``plugin`` (a stage hook, or a set-up step of
    :data:`SETUP_STEPS`, said as what it is): the error and where it was raised (the innermost frame's
    file:line, as load errors say it). With ``host``, the innermost frame that is a plugin's code decides whose
    error it is: another plugin's is named first (it failed in that plugin's code, ``plugin`` only called it)."""
    what = f"{type(exc).__name__}: {exc}"
    failing = _failing(stage, split)
    frames = _frames(exc.__traceback__)
    if not frames:
        return f"{failing} failed in plugin {plugin!r}: {what}"
    inner = frames[-1]
    where = f"at {inner.file}:{inner.line}"
    modules = plugin_modules(host) if host is not None else {}
    for frame in reversed(frames):
        owner = plugin_of_module(frame.module, modules, plugin) if modules else None
        if owner is None:
            continue
        if owner == plugin:
            break
        if frame is not inner:
            where += f", called from {frame.file}:{frame.line}"
        return (f"{failing} of plugin {plugin!r} failed in the code of plugin {owner!r} "
                f"({frame.function}, which {plugin!r} called): {what} ({where})")
    return f"{failing} failed in plugin {plugin!r}: {what} ({where})"


def expect_list_of(value: Any, kind: type[Any], stage: str, plugin: str) -> list[Any]:
    """``value`` as a list of ``kind`` (validated from dicts), or a :class:`PluginError` naming the plugin."""
    if value is None:
        raise PluginError(
            f"plugin {plugin!r} returned nothing from {stage!r}; it must return a list of {kind.__name__}."
        )
    try:
        return [item if isinstance(item, kind) else kind.model_validate(item) for item in value]
    except Exception as exc:
        raise PluginError(
            f"plugin {plugin!r} returned something other than a list of {kind.__name__} from {stage!r}: {exc}"
        ) from exc


_UNIQUE_IDS = ("a trajectory's id must be unique across the run store, not only within one call (ids built from "
               "the task and sample repeat across steps, evaluations and runs): leave Trajectory.id at its "
               "default, a fresh uuid4")


def check_trajectories(trajectories: list[Trajectory], hook: str, plugin: str) -> list[Trajectory]:
    """What ``hook`` (``collect`` or ``evaluate``) of ``plugin`` returned, checked before anything of it is used
    or stored: every trajectory has an id of its own (no two alike, none empty) and a reward that is a finite
    number (:func:`~seal_platform.errors.finite_reward`). Anything else is a :class:`PluginError` naming the
    plugin and the hook."""
    _check_distinct_ids(trajectories, hook, plugin)
    for t in trajectories:
        if not isinstance(t.id, str) or not t.id:
            raise PluginError(f"{hook} of plugin {plugin!r} returned a trajectory (task {t.task_id!r}) with the "
                              f"id {t.id!r}; {_UNIQUE_IDS}.")
        if not finite_reward(t.reward):
            raise PluginError(f"{hook} of plugin {plugin!r} returned reward {t.reward!r} for trajectory {t.id!r} "
                              f"(task {t.task_id!r}), which is not a finite number.")
    return trajectories


def _check_distinct_ids(trajectories: list[Trajectory], hook: str, plugin: str) -> None:
    duplicates = [tid for tid, n in Counter(t.id for t in trajectories).items() if n > 1]
    if duplicates:
        raise PluginError(f"{hook} of plugin {plugin!r} returned trajectories with duplicate ids "
                          f"{listed(duplicates)}; {_UNIQUE_IDS}.")


def check_collected(value: Any, tasks: Sequence[Task], group_size: int, plugin: str) -> list[Trajectory]:
    """What ``collect`` of ``plugin`` returned for ``tasks``, checked: a list of trajectories
    (:func:`expect_list_of`), one per task and sample, with ids and rewards as :func:`check_trajectories` wants
    them; or a :class:`PluginError` naming the plugin."""
    trajectories = expect_list_of(value, Trajectory, "collect", plugin)
    # One per task and sample: an episode lost to the infrastructure comes back as a failed trajectory
    # (seal_platform.infra), never dropped; each dynamic-sampling round is one call with its own tasks.
    wanted = len(tasks) * group_size
    if len(trajectories) != wanted:
        raise PluginError(f"plugin {plugin!r} returned {len(trajectories)} trajectories from 'collect' for "
                          f"{len(tasks)} task(s) x group_size {group_size}; it must return {wanted} (an episode "
                          "lost to the infrastructure is returned as a failed trajectory, not left out).")
    return check_trajectories(trajectories, "collect", plugin)


def check_ids_unused(store: RunStore | None, trajectories: list[Trajectory], hook: str, plugin: str) -> None:
    """Right before a step's (or an evaluation's) trajectories are stored, what the check of each call
    (:func:`check_collected`, :func:`score_evaluation`: empty ids, rewards, duplicates within the call) could
    not see: no two of them share an id across calls (with dynamic sampling a step's rounds are separate calls)
    and no id is in the run store already (an earlier step, evaluation or run). Anything else is a
    :class:`PluginError` naming the plugin and the hook, raised before anything of it is written."""
    _check_distinct_ids(trajectories, hook, plugin)
    if store is None or not trajectories:
        return
    used = store.trajectory_ids_in_use([t.id for t in trajectories])
    if used:
        where = [f"{tid!r} (run {run}, step {step}, {phase})" for tid, (run, step, phase) in used.items()]
        raise PluginError(f"{hook} of plugin {plugin!r} returned trajectories whose ids are already in the run "
                          f"store: {listed(where, quote=False)}; {_UNIQUE_IDS}.")


def check_one_per_task(trajectories: list[Trajectory], tasks: Sequence[Task], plugin: str) -> None:
    """``evaluate``'s trajectories are one per task it was given (by ``task_id``), or a :class:`PluginError`."""
    wanted, got = Counter(t.id for t in tasks), Counter(t.task_id for t in trajectories)
    if wanted == got:
        return
    missing, extra = list((wanted - got).elements()), list((got - wanted).elements())
    said = (f"; none for task(s) {listed(missing)}" if missing else "") + \
        (f"; more than one, or one not asked for, for task(s) {listed(extra)}" if extra else "")
    raise PluginError(f"evaluate of plugin {plugin!r} returned {len(trajectories)} trajectories for {len(tasks)} "
                      f"task(s); it must return one per task (an episode lost to the infrastructure is returned as "
                      f"a failed trajectory, not left out){said}.")


def check_eval_result(result: EvalResult, tasks: Sequence[Task] | None, plugin: str) -> None:
    """An :class:`EvalResult` an environment scored itself: pass rates are percentages (finite, 0 to 100), it
    counts the tasks it was given, and the trajectories it carries (stored with it) pass
    :func:`check_trajectories`."""
    bad = {c: r for c, r in result.per_category.items() if not (math.isfinite(r) and 0.0 <= r <= 100.0)}
    if bad:
        raise PluginError(f"evaluate of plugin {plugin!r} returned pass rates that are not percentages (finite "
                          f"numbers from 0 to 100): {listed(f'{c}: {r}' for c, r in bad.items())}.")
    if tasks is not None and result.n_tasks != len(tasks):
        raise PluginError(f"evaluate of plugin {plugin!r} returned an EvalResult of {result.n_tasks} task(s) for "
                          f"{len(tasks)} task(s); it must score each task it was given once (a task whose episode "
                          "was lost to the infrastructure is counted in n_tasks and in n_infra_failures).")
    if result.n_infra_failures > result.n_tasks:
        raise PluginError(f"evaluate of plugin {plugin!r} returned an EvalResult with {result.n_infra_failures} "
                          f"infrastructure failure(s) among {result.n_tasks} task(s).")
    check_trajectories(result.trajectories, "evaluate", plugin)


def label_list(value: Any, plugin: str) -> list[Any]:
    """``value`` (what a diagnoser returned) if it is a list of labels; a str, dict or anything but a list or
    tuple is a :class:`PluginError` naming the plugin (a str would be read letter by letter)."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        raise PluginError(f"plugin {plugin!r} must return a list of TurnLabel from 'diagnose', not "
                          f"{type(value).__name__}.")
    return list(value)


def checked_labels(value: Any, plugin: str, registered: dict[str, tuple[str, Any]], turns: dict[str, int],
                   undeclared: dict[str, set[str]] | None = None) -> list[TurnLabel]:
    """The labels diagnoser plugin ``plugin`` returned, checked against what it registered and the step's
    trajectories (``turns``: id -> number of ground-truth turns): each label is a non-empty string, names one
    of its diagnosers in ``source`` and labels a turn of one of the step's trajectories. Anything else is a
    :class:`PluginError` naming the plugin; nothing of it is stored.

    A label its spec does not declare is kept (the LLM judge falls back to the heuristic diagnoser's label
    for a turn it could not judge) and added to ``undeclared`` (diagnoser -> labels), for the run to record,
    unless another registered diagnoser declares it (that fallback) or its spec declares no labels at all
    (the controls: an open label set)."""
    labels = expect_list_of(label_list(value, plugin), TurnLabel, "diagnose", plugin)
    own = {name: spec for name, (owner, spec) in registered.items() if owner == plugin}
    known = {label for _owner, spec in registered.values() for label in spec.labels}
    for lab in labels:
        where = f"plugin {plugin!r} returned a label from 'diagnose' ({lab.label!r} for turn {lab.turn} of " \
            f"trajectory {lab.trajectory_id!r}, source {lab.source!r})"
        if lab.source not in own:
            raise PluginError(f"{where} whose source is not a diagnoser it registers "
                              f"({', '.join(sorted(own)) or 'none'}).")
        if lab.trajectory_id not in turns:
            raise PluginError(f"{where} for a trajectory that is not one of the step's.")
        n = turns[lab.trajectory_id]
        if lab.turn < 0 or (n and lab.turn >= n):
            raise PluginError(f"{where} for a turn the trajectory does not have (it has {n} ground-truth turns).")
        if not lab.label.strip():
            declared = own[lab.source].labels
            raise PluginError(f"{where} that is empty: a label names what happened in the turn"
                              + (f" (one of {listed(declared, 8)})." if declared else "."))
        if undeclared is not None and own[lab.source].labels and lab.label not in known:
            undeclared.setdefault(lab.source, set()).add(lab.label)
    return labels


def undeclared_note(step: int, undeclared: dict[str, set[str]]) -> tuple[str, dict[str, Any]]:
    """The ``labels_undeclared`` event of a step (message, data): which diagnoser returned which labels that
    no registered diagnoser declares (kept all the same)."""
    said = "; ".join(f"diagnoser {name!r}: {listed(sorted(labels), 10)}"
                     for name, labels in sorted(undeclared.items()))
    return (f"step {step}: labels that no diagnoser declares (DiagnoserSpec.labels) were kept and count as any "
            f"other ({said}); declare them, or fix the diagnoser if they are mistakes.",
            {"step": step, "diagnosers": {name: sorted(labels) for name, labels in sorted(undeclared.items())}})


def sampling_for(config: RunConfig, *, evaluation: bool, max_new_tokens: int | None = None,
                 stop: Sequence[str] = ()) -> SamplingParams:
    """The one rule for an episode's sampling, from the recipe.

    Training rollouts: ``rollout.temperature`` and ``rollout.top_p``; evaluation: greedy (temperature 0,
    top-p 1). New tokens per generation: in evaluation ``evaluation.max_new_tokens`` when set, then the
    environment's own cap ``max_new_tokens`` (its setting; None: none), then ``rollout.max_new_tokens``.
    ``stop``: the environment's stop strings."""
    rollout = config.rollout
    if evaluation:
        cap = config.evaluation.max_new_tokens or max_new_tokens or rollout.max_new_tokens
        return SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=cap, stop=list(stop))
    return SamplingParams(temperature=rollout.temperature, top_p=rollout.top_p,
                          max_new_tokens=max_new_tokens or rollout.max_new_tokens, stop=list(stop))


def collect_sampling(config: RunConfig) -> SamplingParams:
    """The sampling ``collect`` gets: :func:`sampling_for` training rollouts (the recipe's ``rollout`` section)."""
    return sampling_for(config, evaluation=False)


def evaluate_sampling(config: RunConfig) -> SamplingParams:
    """The sampling ``evaluate`` gets: :func:`sampling_for` evaluation (greedy, ``evaluation.max_new_tokens``,
    default ``rollout.max_new_tokens``)."""
    return sampling_for(config, evaluation=True)


def score_evaluation(result: Any, split: str, plugin: str, tasks: Sequence[Task] | None = None) -> EvalResult:
    """What ``evaluate`` returned for ``tasks``, checked and as an :class:`EvalResult`: verified trajectories
    (one per task, :func:`check_one_per_task`; ids and rewards, :func:`check_trajectories`) are scored here
    (pass rate per category); an ``EvalResult`` (an environment with its own scoring,
    :func:`check_eval_result`) is taken as it is, recorded under ``split``: the core chose the tasks, so the
    split is the core's to name. ``tasks`` None: the count is not checked."""
    if isinstance(result, EvalResult):
        check_eval_result(result, tasks, plugin)
        return result if result.split == split else result.model_copy(update={"split": split})
    if isinstance(result, list):
        try:
            trajectories = [t if isinstance(t, Trajectory) else Trajectory.model_validate(t) for t in result]
        except Exception as exc:
            raise PluginError(
                f"plugin {plugin!r} returned something other than trajectories from 'evaluate': {exc}"
            ) from exc
        if tasks is not None:
            check_one_per_task(trajectories, tasks, plugin)
        check_trajectories(trajectories, "evaluate", plugin)
        return EvalResult.from_trajectories(split, trajectories)
    raise PluginError(f"plugin {plugin!r} must return a list of Trajectory (or an EvalResult) from 'evaluate', "
                      f"not {type(result).__name__}.")


def adopt_interface(new: Any, current: Interface, step: int, plugin: str) -> Interface:
    """The revision ``evolve_interface`` proposed, numbered by the core: ``revision = current + 1``,
    ``parent = current``, ``step``."""
    if not isinstance(new, Interface):
        raise PluginError(f"plugin {plugin!r} must return an Interface or None from 'evolve_interface'.")
    return new.model_copy(update={"revision": current.revision + 1, "parent": current.revision, "step": step})


def call_impl(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """Call a hook implementation with the arguments it names (as pluggy does), the rest left out."""
    names = [
        name for name, p in inspect.signature(fn).parameters.items()
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return fn(**{name: kwargs[name] for name in names if name in kwargs})


def collect_with(fn: Callable[..., Any], *, ctx: Any, environment: Any, engine: Any, tasks: list[Any],
                 interface: Interface, group_size: int, step: int, plugin: str = "test") -> list[Trajectory]:
    """``fn`` (a ``collect`` implementation) called and checked as the run loop does (:func:`check_collected`)."""
    result = call_impl(fn, ctx=ctx, environment=environment, engine=engine, tasks=tasks, interface=interface,
                       group_size=group_size, step=step, sampling=collect_sampling(ctx.config))
    return check_collected(result, tasks, group_size, plugin)


def evaluate_with(fn: Callable[..., Any], *, ctx: Any, environment: Any, engine: Any, tasks: list[Any],
                  step: int, plugin: str = "test", interface: Interface | None = None) -> EvalResult:
    """``fn`` (an ``evaluate`` implementation) called and scored as the run loop does (``interface`` None:
    the pristine one, as at every scheduled point)."""
    result = call_impl(fn, ctx=ctx, environment=environment, engine=engine, tasks=tasks, step=step,
                       sampling=evaluate_sampling(ctx.config), interface=interface)
    return score_evaluation(result, ctx.config.evaluation.split, plugin, tasks)
