"""Hook specifications of seal-platform (pluggy project ``seal_platform``).

There are four kinds of hooks:

* **setup hooks** (``register_*``), called when a run or a CLI command starts, through which a plugin tells the
  core what it provides: its settings model, environments (benchmarks), diagnosers, rollout engines, CLI
  commands, and how its step metrics are shown. Every plugin's answer is collected.
* **lifecycle hooks** (``check_config``, ``check_machine``, ``start_run``, ``end_run``, ``save_checkpoint``,
  ``load_checkpoint``), called on every enabled plugin that implements them.
* the **tracking hook** (``track``), called on every enabled plugin that implements it as the run records
  step metrics, evaluations, interface revisions and labels (trackers: TensorBoard, MLflow...);
* **stage hooks**, called once per training step by the run loop (``seal_platform.loop``), always with keyword
  arguments and always from that one place, in this order::

      collect -> diagnose -> evolve_interface -> reweight -> optimize      (every step)
      evaluate                                                             (before training, every K steps, at the end)

  Stages that one plugin must own are called on that plugin only: ``collect`` and ``evaluate`` on the plugin
  that registered the recipe's environment, ``evolve_interface``, ``reweight`` and ``optimize`` on the plugin
  the recipe names for them. ``diagnose`` is called on every enabled plugin that registered a diagnoser the
  recipe enables, and all their labels are kept.

A hook implementation may accept any subset of the arguments listed below (pluggy passes only the ones it
names), so new arguments can be added without breaking existing plugins. An implementation whose name or
arguments match no spec here (a misspelt ``save_checkpoints``, an argument no spec has) fails its whole plugin:
the plugin is left out and recorded as failed with the reason (``seal-platform plugins``, every run's console,
and every recipe error about something it would have provided). Mark a deliberate extra hook of your own
``@hookimpl(optionalhook=True)``. Write ``from seal_platform import hookimpl``. All hooks, the setup hooks
included, are called through pluggy.

Every argument named ``ctx`` is the run's :class:`seal_platform.context.RunContext`: the resolved config,
each plugin's validated settings section (``ctx.settings_for(name)``), the run directory, the seed, the
run store and a ``shared`` dict through which cooperating plugins of one run hand objects to each other.
A hook of a training step (``collect`` to ``optimize``) may add metrics of its own to the step's with
``ctx.add_step_metrics(name=value)``: they are stored with the optimizer's in the step row (``show``, the
report, trackers' ``step`` events); the LLM judge records its fallback rate per step this way. How any of
a step's metrics is shown (which count updates, which explain a skipped step) is declared by
``register_metrics``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover - imports for annotations only
    from pathlib import Path

    import click
    from pydantic import BaseModel

    from .capability import CapabilityState
    from .config import Issue, RunConfig
    from .context import RunContext
    from .engine import RolloutEngine
    from .environment import Environment
    from .registry import Cluster, ClusterSpec, DiagnoserSpec, EngineSpec, EnvironmentSpec, ExecutorSpec, MetricSpec
    from .rollouts import RolloutsInFlight
    from .types import (
        EvalResult,
        Interface,
        ReweightResult,
        SamplingParams,
        Task,
        TrackEvent,
        Trajectory,
        TurnLabel,
    )

PROJECT = "seal_platform"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- setup hooks ---------------------------------------------------------------------------------------


@hookspec
def register_settings() -> dict[str, type[BaseModel]]:
    """Declare the recipe sections this plugin owns and the pydantic models that validate them.

    Called when a recipe is loaded or validated (``seal-platform run``, ``config validate``), before any
    stage hook. No arguments. Like every ``register_*`` hook it is called once per plugin, when the plugins
    are loaded (where its answer is checked); the core keeps that answer for the rest of the command.

    :returns: a mapping from section name (a key of the recipe's ``settings:`` table, usually the plugin's
        own name) to a pydantic model class. Unknown keys in the section are reported as errors (so typos in
        recipes are caught) unless the model, or a model nested in it, sets ``model_config["extra"]`` itself:
        derive from ``seal_platform.config.Section`` (which forbids them) to be explicit, set
        ``extra="allow"`` to accept free-form keys. A section that is absent from the recipe is built from the
        model's defaults, so every field must have a default: a plugin whose model has a required field (or
        defaults that do not validate) is failed when the plugins are loaded, with a reason naming the model,
        and left out, as a plugin that cannot be imported is (a recipe that needs it says so; the others run
        without it). Give integer fields both bounds (``Field(ge=..., le=...)``): a recipe asking for 10**12
        workers is then refused by ``config validate`` with the key and the bound, not deep inside a library
        (the default plugins are held to this by a test; a third-party plugin's unbounded field is not refused).

    All results are collected; a section two plugins register is left out: a recipe that sets it gets a
    problem naming both plugins (block all but one), other recipes are unaffected.
    """


@hookspec
def register_environments() -> list[EnvironmentSpec]:
    """Declare the environments (benchmarks) this plugin provides.

    Called when a run starts and by ``seal-platform plugins``, ``verify`` and ``config validate``.

    :returns: a list of :class:`seal_platform.registry.EnvironmentSpec` (name, factory, description, and
        optionally ``splits``: the task splits it has, so that a recipe asking for another is refused when it
        is planned, before a run's row is written). The factory is called as ``factory(ctx)``, after
        ``start_run`` and before the rollout engine is built, for the run's environment and for each of
        ``evaluation.benchmarks`` (so that a failing factory, a bad split or an empty task list is refused
        before a long model load and before any step; the engine is not yet in ``ctx.shared``), and returns
        an object satisfying :class:`seal_platform.environment.Environment`. The plugin that registers the environment
        named by the recipe's ``environment`` key owns the ``collect`` and ``evaluate`` stages.

    All results are collected; a name two plugins register is left out: a recipe that uses it gets a
    problem naming both plugins (block all but one), other recipes are unaffected.
    """


@hookspec
def register_diagnosers() -> list[DiagnoserSpec]:
    """Declare the diagnosers this plugin provides.

    Called when a run starts and by ``seal-platform plugins``. A plugin that registers at least one diagnoser
    enabled by the recipe (``diagnosis.diagnosers``; all registered diagnosers but the ``explicit`` ones by
    default) that labels the run's environment (``DiagnoserSpec.environments``, empty: any) has its
    ``diagnose`` implementation called every step; the enabled names are ``ctx.diagnosers``.

    :returns: a list of :class:`seal_platform.registry.DiagnoserSpec` (name, description).

    All results are collected; a name two plugins register is left out: a recipe that uses it gets a
    problem naming both plugins (block all but one), other recipes are unaffected.
    """


@hookspec
def register_rollout_engines() -> list[EngineSpec]:
    """Declare the rollout engines (generation back ends) this plugin provides.

    Called when a run starts. The engine named by the recipe's ``rollout.engine`` key is built once per run
    as ``factory(ctx)``, after ``start_run`` and after the environment and its tasks, and passed to ``collect``,
    ``evaluate`` and ``optimize``.

    :returns: a list of :class:`seal_platform.registry.EngineSpec` (name, factory, description). The factory
        returns an object satisfying :class:`seal_platform.engine.RolloutEngine`; it must import heavy
        libraries (torch, vllm) inside the factory, never at module import time.

    All results are collected; a name two plugins register is left out: a recipe that uses it gets a
    problem naming both plugins (block all but one), other recipes are unaffected.
    """


@hookspec
def register_executors() -> list[ExecutorSpec]:
    """Declare the episode executors (where environment episodes run) this plugin provides.

    Called when a run starts (and by ``config validate``). The executor named by the recipe's
    ``rollout.executor`` key is built once per run as ``factory(ctx, on_progress)`` and handed to every hook
    as ``ctx.executor``; environments submit their episodes to it with
    ``ctx.executor.map(fn, items, on_infra_failure=...)``. The name ``local`` (threads in the driver
    process) is built into the core and cannot be registered. The core closes the executor when the run ends.

    :returns: a list of :class:`seal_platform.registry.ExecutorSpec` (name, factory, description, and the
        registered cluster it needs, if any: the recipe must enable that cluster). The
        factory returns an object satisfying :class:`seal_platform.executor.Executor`; it must import heavy
        libraries (ray) inside the factory and should start a cluster only on first use. ``fn`` and the
        items may be shipped to other processes or machines (so they must pickle); a unit lost to the
        infrastructure (a dead worker, a lost node, a time limit) is replaced by
        ``on_infra_failure(item, reason)`` when that is given, never silently dropped.

    All results are collected; a name two plugins register is left out: a recipe that uses it gets a
    problem naming both plugins (block all but one), other recipes are unaffected.
    """


@hookspec
def register_clusters() -> list[ClusterSpec]:
    """Declare the compute clusters (Ray, say) this plugin can connect a run to.

    Called when a recipe is checked and when a run starts. ``factory(config, settings)`` returns the cluster
    the recipe enables in this plugin's own settings section, or None; at most one registered cluster may be
    enabled. The enabled one (a :class:`seal_platform.registry.Cluster`: ``name``, ``address``,
    ``acquire``/``release`` leases, ``infra_errors``) is ``ctx.cluster`` during the run and the ``cluster``
    argument of ``check_config`` and ``check_machine``: executors, engine replicas and trainer groups of any
    plugin use it through that contract, never by importing the plugin that registered it.

    :returns: a list of :class:`seal_platform.registry.ClusterSpec` (name, factory, description, enable: how a
        recipe turns it on). The factory must not connect or import heavy libraries.

    All results are collected; a name two plugins register is left out: a recipe that uses it gets a
    problem naming both plugins (block all but one), other recipes are unaffected.
    """


@hookspec
def register_metrics() -> list[MetricSpec]:
    """Declare how the step metrics this plugin records are shown.

    Called once per plugin when the plugins are loaded, like every ``register_*`` hook but
    ``register_commands`` (where its answer is checked); the core keeps that answer for what shows a run: the
    live progress line, the end-of-run summary, ``seal-platform show`` and the HTML report (with the plugins
    of the run; a stored run is shown with the declarations of the plugins installed now). The output never
    reads a plugin's metric names: it reads these declarations.
    A metric nobody declares is still stored and shown by name (``show``'s metrics column, when the step has
    no ``update`` metric).

    :returns: a list of :class:`seal_platform.registry.MetricSpec`, one per metric name: its description,
        short label, format, and ``role`` (:data:`seal_platform.registry.METRIC_ROLES`). An optimizer
        (``stages.optimize``) declares its headline metrics (role ``update``: a loss, a gradient norm; shown
        for every step that updated, plotted by the report), the number of updates of a step (``updates``:
        0 means no update; the "policy updates" of the summary and the report are its sum; a step without it
        counts as updated) and, if it has them, ``trained_sequences``, ``skipped_sequences``,
        ``trained_tokens``, ``update_seconds`` and ``tokens_per_s``. A metric that explains why a step did not
        update gives ``skip_reason`` (and ``skipped``, when "above 0" is not the rule). Metrics of another
        kind (a diagnoser's, say) may be shown apart as a ``group``: a column of ``show`` and a section of
        the report.

    All results are collected, in the order the plugins are called, after the core's own (dynamic
    sampling's ``ds_*``); a name declared twice keeps its first declaration. A plugin whose hook raises or
    returns anything but a list of ``MetricSpec`` is failed when the plugins are loaded, with the reason,
    and left out, as for every registration hook (its metrics are shown by name).
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add subcommands to the ``seal-platform`` command line.

    Called once when the CLI starts, before arguments are parsed, on one plugin at a time. Each plugin adds
    to a group of its own, whose commands join the CLI when the hook returns; a plugin whose hook raises, or
    that adds a command named like one the CLI already has (a core command or another plugin's), adds
    nothing, is named in a warning and is listed as failed by ``seal-platform plugins``; the other plugins'
    commands are all added.

    :param cli: a :class:`click.Group` whose commands become top-level commands; use ``@cli.command()`` to
        add commands.

    Return value ignored.
    """


# --- lifecycle hooks -----------------------------------------------------------------------------------


@hookspec
def check_config(config: RunConfig, settings: dict[str, BaseModel], cluster: Cluster | None) -> list[Issue]:
    """Problems with the recipe that involve this plugin's settings and something outside them (the cluster,
    the core's keys): checks a settings model cannot make alone.

    Called on every enabled plugin by ``config validate``, ``run`` and ``eval`` with the other recipe checks,
    on any machine (check nothing about this machine here: that is ``check_machine``'s).

    :param config: the run's validated config.
    :param settings: every enabled plugin's validated settings section, by section name.
    :param cluster: the cluster the recipe enables (``register_clusters``), or None.

    :returns: a list of :class:`seal_platform.config.Issue` (where: the dotted key, what, fix); the lists of
        all plugins are collected and reported with every other problem of the recipe.
    """


@hookspec
def check_machine(config: RunConfig, settings: dict[str, BaseModel], cluster: Cluster | None) -> list[str]:
    """Can this machine run what the recipe asks of this plugin? (devices, drivers, Ray resources...)

    Called on every enabled plugin by ``seal-platform run`` (new and resumed runs) and ``seal-platform eval``,
    after the recipe is validated and before anything is written to the store or loaded: a problem found here
    stops the command with nothing started, where the same problem found in ``start_run`` would leave a failed
    run behind after minutes of loading. Not called by ``config validate``, which checks a recipe on any
    machine (a GPU recipe validates on a laptop).

    Check only what is cheap (no model loads, no cluster start) and only what the recipe asks of this plugin;
    never fall back silently: a run asking for a GPU that cannot be used must stop here, not run on the CPU.

    :param config: the run's validated config.
    :param settings: every enabled plugin's validated settings section, by section name.
    :param cluster: the cluster the recipe enables (``register_clusters``), or None; with an ``address`` the
        work it places runs on that cluster's machines, not this one.

    :returns: a list of problems, each one paragraph that says what was asked, what this machine has and what
        to do (an empty list when all is well). Every plugin's answer is collected and all problems are
        reported together.
    """


@hookspec
def start_run(ctx: RunContext, resumed: bool) -> None:
    """A run is starting (or resuming): load models, open resources, fill ``ctx.shared``.

    Called once on every enabled plugin, after the run's row is written to the store and before the rollout
    engine is built (likewise before ``seal-platform eval`` evaluates a checkpoint, with ``resumed`` True;
    ``seal-platform verify`` starts and ends only the benchmark's own plugin, with ``ctx.run_dir`` a
    temporary directory that is removed when it ends). Once built, the engine is
    available to every hook as ``ctx.shared["engine"]``; the core closes it after ``end_run``. The order of
    all of it is :mod:`seal_platform.lifecycle`.

    :param ctx: the run context.
    :param resumed: True when the run continues from a checkpoint; ``load_checkpoint`` follows.

    Return value ignored. An exception stops the run, which is then marked ``failed``.
    """


@hookspec
def end_run(ctx: RunContext, status: str) -> None:
    """The run has ended: release resources (engines, worker pools, files).

    Called once on every enabled plugin after the ``start_run`` hooks succeeded, also when the run then
    failed or was interrupted (not when a ``start_run`` raised).

    :param ctx: the run context.
    :param status: ``"completed"``, ``"failed"`` or ``"interrupted"``.

    Return value ignored; exceptions are logged as events and do not hide the run's own error.
    """


@hookspec
def save_checkpoint(ctx: RunContext, directory: Path, step: int) -> dict[str, Any] | None:
    """Write this plugin's part of a checkpoint (model weights, optimizer state, RNG state...).

    Called on every enabled plugin after a training step when a checkpoint is due. ``directory`` is a
    temporary directory that the core renames into place (atomically) once every plugin has returned and
    the files are flushed to disk; only then is the checkpoint recorded in the run store. Write only inside
    ``directory`` (a sub-directory named after the plugin is a good habit).

    :param ctx: the run context.
    :param directory: where to write.
    :param step: the last completed training step.
    :returns: optional JSON-serialisable metadata to record with the checkpoint, or None.

    All results are collected (each plugin writes its own part).
    """


@hookspec
def load_checkpoint(ctx: RunContext, directory: Path, step: int) -> None:
    """Restore this plugin's state from a checkpoint written by ``save_checkpoint``.

    Called on every enabled plugin when a run resumes (and by ``seal-platform eval``), after ``start_run``
    and after the rollout engine is built, so restored weights can be pushed into ``ctx.shared["engine"]``.

    :param ctx: the run context.
    :param directory: the durable checkpoint directory.
    :param step: the training step the checkpoint was taken after.

    Return value ignored.
    """


# --- tracking hooks ------------------------------------------------------------------------------------


@hookspec
def track(ctx: RunContext, event: TrackEvent) -> None:
    """Observe what the run records, as it is recorded (for trackers: TensorBoard, MLflow, ...).

    Called by the run loop on every enabled plugin that implements it, right after the run store has
    recorded the thing the event describes: ``event.kind`` is ``"interface"`` (a training-interface
    revision: the pristine one when a new run starts, then each one ``evolve_interface`` produced;
    ``event.interface``), ``"labels"`` (a training step's turn labels from every diagnoser;
    ``event.labels``), ``"step"`` (a training step's metrics after ``optimize``:
    ``reward/mean``, ``trajectories``, the optimizer's metrics, ``time/<stage>``; ``event.metrics``, and the
    A-Patch weights of the step's labels, ``event.label_weights``), ``"evaluation"`` (``event.evaluation``, an
    :class:`EvalResult` with per-category pass rates and the trajectories) or ``"report"`` (the HTML report
    ``seal-platform run`` wrote at its end, ``event.path``: sent after ``end_run``). In one training step the
    order is ``interface`` (if ``evolve_interface`` made a new revision), then ``labels`` and ``step`` (both
    recorded with the step). ``seal_platform.tracking.scalars(event)`` gives any event as named numbers.
    See :mod:`seal_platform.tracking`; the shipped trackers are the ``wandb`` and ``mlflow`` plugins
    (docs/trackers.md) and ``examples/seal-tensorboard``.

    :param ctx: the run context (``ctx.run_dir`` is a good place for a tracker's files).
    :param event: a :class:`seal_platform.tracking.TrackEvent` (``kind``, ``run_id``, ``step`` and the
        fields its kind sets).

    Return value ignored. All implementations are called, each on its own: one that raises is recorded as a
    ``tracker_failed`` event and the run goes on.
    """


# --- stage hooks ---------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def collect(
    ctx: RunContext,
    environment: Environment,
    engine: RolloutEngine,
    tasks: list[Task],
    interface: Interface,
    group_size: int,
    step: int,
    sampling: SamplingParams,
) -> list[Trajectory]:
    """Run on-policy rollouts of a batch of training tasks and verify them.

    Called once per training step, first, on the plugin that registered the recipe's environment only (with
    dynamic sampling, once more per further round). With ``rollout.overlap`` the call for step ``t + 1`` is
    made from a background thread of the core while step ``t``'s ``reweight`` and ``optimize`` run (never
    alongside another ``collect``, ``diagnose``, ``evolve_interface`` or ``evaluate``); its engine samples
    with the weights from before step ``t``'s update (see :mod:`seal_platform.rollouts`).

    :param ctx: the run context.
    :param environment: the environment object built from that plugin's ``EnvironmentSpec``.
    :param engine: the rollout engine; the only way an environment reaches the policy.
    :param tasks: this step's batch of training tasks (chosen by the core: seeded, epoch by epoch).
    :param interface: the current *training* interface revision to present to the agent.
    :param group_size: rollouts per task (GRPO's G); rollouts of one task share ``Trajectory.group``.
    :param step: the training step, from 0.
    :param sampling: the sampling of training rollouts, filled in by the core from the recipe's ``rollout``
        section (temperature, top-p, max new tokens). Add only what is the environment's own (stop strings,
        a seed per rollout) with ``sampling.model_copy(update=...)``; do not rebuild it from the config.
    :returns: ``len(tasks) * group_size`` verified trajectories (reward and per-turn verdicts set). The core
        checks them before it uses or stores any: that count, a finite ``reward`` each, and ids unique across
        the run store (leave ``Trajectory.id`` at its default, a fresh uuid4; ids built from the task and
        sample repeat across steps and runs). Anything else fails the step with an error naming the plugin.

    First result wins (only one plugin is called).
    """


@hookspec
def diagnose(ctx: RunContext, environment: Environment, trajectories: list[Trajectory], step: int) -> list[TurnLabel]:
    """Label every ground-truth turn of every trajectory with a failure label (successes too).

    Called once per training step, after ``collect``, on every plugin that registered an enabled diagnoser.

    :param ctx: the run context.
    :param environment: the run's environment (the core calls a diagnoser only in runs of the environments
        its ``DiagnoserSpec.environments`` lists, so it need not check).
    :param trajectories: this step's verified trajectories.
    :param step: the training step.
    :returns: a list of :class:`TurnLabel`, each naming its diagnoser in ``source``. The labels of the
        recipe's primary diagnoser (``diagnosis.primary``) drive the capability state and A-Patch; every
        diagnoser's labels are stored. A label may carry a ``confidence`` (0..1) when the diagnoser states one.
        The core calls each plugin on its own and checks what it returns: anything but a list (a str, a dict),
        a label whose ``source`` is not a diagnoser the plugin registered, one for a trajectory not among
        ``trajectories`` or a turn it does not have, or an empty label fails the step with an error naming the
        plugin. A label that no registered diagnoser declares (``DiagnoserSpec.labels``; a diagnoser that
        declares none is not checked) is kept, and the step records one ``labels_undeclared`` event naming
        the diagnoser and those labels.

    All results are collected and concatenated. A diagnoser that builds on the others' labels (an LLM judge
    refining the heuristic labels) may implement this hook as a pluggy wrapper
    (``@hookimpl(wrapper=True)``): ``results = yield`` gives it the other called diagnosers' lists, and it
    returns them with its own list appended.
    """


@hookspec(firstresult=True)
def evolve_interface(
    ctx: RunContext,
    environment: Environment,
    interface: Interface,
    state: CapabilityState,
    step: int,
) -> Interface | None:
    """Propose the next training-interface revision from the capability state.

    Called once per training step, after ``diagnose`` and the capability-state update, on the plugin named
    by the recipe's ``stages.evolve_interface`` only (not called when that is ``null``); and once more on a
    fresh run, before the first ``collect``, with the empty state and ``step = 0``, so that changes that do
    not depend on diagnoses are in place for the first rollouts.

    :param ctx: the run context.
    :param environment: the run's environment.
    :param interface: the current training revision.
    :param state: the capability state, already updated with this step's labels.
    :param step: the training step.
    :returns: a new :class:`Interface` with its content (``system_text``, ``spec``) and ``changes``/
        ``driven_by`` filled; or None to keep the current one. The core sets ``revision`` (the current one
        + 1), ``parent`` (the current one) and ``step`` on what you return, whatever they were. Evaluation
        never sees it.

    First result wins (only one plugin is called).
    """


@hookspec(firstresult=True)
def reweight(
    ctx: RunContext,
    trajectories: list[Trajectory],
    labels: list[TurnLabel],
    state: CapabilityState,
    step: int,
) -> ReweightResult:
    """Turn the diagnoses into a scale for each trajectory's advantage (A-Patch).

    Called once per training step, after ``evolve_interface``, on the plugin named by the recipe's
    ``stages.reweight`` only. When that is ``null`` every trajectory gets weight 1.

    :param ctx: the run context.
    :param trajectories: this step's trajectories.
    :param labels: the primary diagnoser's labels for them.
    :param state: the capability state, already updated with this step's labels.
    :param step: the training step.
    :returns: a :class:`ReweightResult` with a weight for every trajectory id and the label weights used;
        the core stores the label weights with the step.

    First result wins (only one plugin is called).
    """


@hookspec(firstresult=True)
def optimize(
    ctx: RunContext,
    engine: RolloutEngine,
    trajectories: list[Trajectory],
    weights: dict[str, float],
    step: int,
    rollouts: RolloutsInFlight,
) -> dict[str, float]:
    """Do one policy update on this step's trajectories and push the new weights into the engine.

    Called once per training step, last, on the plugin named by the recipe's ``stages.optimize`` only.

    :param ctx: the run context.
    :param engine: the rollout engine, which must generate with the updated policy from the next step on
        (from the step after the next one when that step's rollouts are already in flight, see ``rollouts``).
    :param trajectories: this step's trajectories (token ids, log-probs and loss masks on their messages).
        With ``rollout.overlap`` they may be one step older than the policy (``Message.policy_version``):
        apply your staleness rule to them.
    :param weights: the advantage scale per trajectory id from ``reweight``.
    :param step: the training step.
    :param rollouts: the next step's rollouts, which with ``rollout.overlap`` the core collects while this
        hook runs (a :class:`seal_platform.rollouts.RolloutsInFlight`). Call ``rollouts.wait()`` before
        anything that changes the weights the engine samples with (pushing the new weights, putting
        engines to sleep, updating a model object the engine generates with), so that no trajectory mixes
        policy versions; it returns at once when nothing is in flight. Take this argument only if your
        implementation does so: ``rollout.overlap`` is refused with an optimizer that does not take it.
    :returns: metrics (loss, KL, clip fraction, grad norm, tokens/s, ...) as a flat dict of floats.

    First result wins (only one plugin is called).
    """


@hookspec(firstresult=True)
def evaluate(
    ctx: RunContext,
    environment: Environment,
    engine: RolloutEngine,
    tasks: list[Task],
    step: int,
    sampling: SamplingParams,
    interface: Interface | None,
) -> list[Trajectory] | EvalResult:
    """Evaluate the policy on held-out tasks with the pristine interface and the unchanged verifier.

    Called before training (``step = 0``), after every ``evaluation.every`` training steps and after the
    last step, on the plugin that registered the recipe's environment only.

    :param ctx: the run context.
    :param environment: the run's environment.
    :param engine: the rollout engine.
    :param tasks: the evaluation tasks.
    :param step: the number of training steps done so far.
    :param sampling: greedy decoding (temperature 0, top-p 1) with ``evaluation.max_new_tokens`` (default
        ``rollout.max_new_tokens``), filled in by the core; add only stop strings of your own.
    :param interface: None for every scheduled evaluation: use the pristine interface (revision 0). With
        ``evaluation.training_interface`` the core calls a second time at each point with the run's current
        training interface, to measure the train/eval gap (stored as ``<environment>@training``); an
        environment whose implementation does not take ``interface`` is refused for that option.
    :returns: the verified trajectories, one per task; the core scores them (pass rate per category, a
        trajectory passes when ``reward > 0.5``: :meth:`EvalResult.from_trajectories`) so every
        environment is scored the same way. An environment with a scoring rule of its own may return an
        :class:`EvalResult` instead, which the core records as it is. The core checks what comes back before
        it scores or stores any of it: one trajectory per task (by ``task_id``; an episode lost to the
        infrastructure is a failed trajectory, not left out), a finite ``reward`` each, ids unique across the
        run store (as for ``collect``); an ``EvalResult`` counts every task (``n_tasks``), those lost to the
        infrastructure among them (``n_infra_failures``, left out of the pass rates: the helper
        ``seal_platform_libs.toolenv.episodes.scored_without_infra_failures`` builds such a result), and its pass
        rates are percentages (0 to 100). Anything else is an error naming the plugin.

    First result wins (only one plugin is called).
    """


#: Which plugins each hook is called on (the "called on" column of the hook reference, docs/hooks.md).
CALLED_ON: dict[str, str] = {
    "register_settings": "every loaded plugin",
    "register_environments": "every loaded plugin",
    "register_diagnosers": "every loaded plugin",
    "register_rollout_engines": "every loaded plugin",
    "register_executors": "every loaded plugin",
    "register_clusters": "every loaded plugin",
    "register_metrics": "every loaded plugin",
    "register_commands": "every loaded plugin",
    "check_config": "every enabled plugin",
    "check_machine": "every enabled plugin",
    "start_run": "every enabled plugin",
    "end_run": "every enabled plugin",
    "save_checkpoint": "every enabled plugin",
    "load_checkpoint": "every enabled plugin",
    "track": "every enabled plugin, one at a time",
    "collect": "the plugin that registered the recipe's `environment`",
    "diagnose": "every plugin that registered a diagnoser the recipe enables",
    "evolve_interface": "the plugin named by `stages.evolve_interface`",
    "reweight": "the plugin named by `stages.reweight`",
    "optimize": "the plugin named by `stages.optimize`",
    "evaluate": "the plugin that registered the recipe's `environment`",
}
