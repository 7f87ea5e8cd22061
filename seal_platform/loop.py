"""The run loop: the one place that calls the stage hooks.

    collect -> diagnose -> evolve_interface -> reweight -> optimize      (every step)
    evaluate                                                             (before training, every K steps, at the end)

It owns what no plugin should: choosing each step's tasks (seeded, epoch by epoch, so a resumed run picks the
same batches), the capability state, the current interface revision, when checkpoints are written and the
run's rows in the store.

The public path is recipe -> plan -> run::

    from seal_platform.planning import plan_recipe
    from seal_platform.loop import run_plan

    summary = run_plan(plan_recipe("recipes/seal-embedded.yaml", ["training.steps=2"]))

Planning (recipe -> :class:`~seal_platform.planning.Plan`) lives in :mod:`seal_platform.planning`, checkpoint
files in :mod:`seal_platform.checkpoints`, what happens around a run (plugins started and ended, the engine
built and closed, the run's final status) in :mod:`seal_platform.lifecycle`.
"""

from __future__ import annotations

import json
import numbers
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import infra, rollouts, scaleout
from .benchmarks import evaluate_benchmarks, prepare_benchmarks
from .capability import CapabilityState
from .checkpoints import (
    CoreState,
    durable_checkpoints,
    load_plugin_checkpoints,
    read_core_state,
    rotate_checkpoints,
    write_checkpoint,
)
from .config import RunConfig
from .context import RunContext
from .environment import Environment
from .errors import PluginError, SealError
from .lifecycle import lifecycle
from .planning import Plan, check_machine
from .plugins import PluginHost
from .recipe_secrets import redact_config, scrub
from .resume import (
    PluginChanges,
    check_restart_point,
    check_resume_plugins,
    check_task_data,
    plan_start,
    record_plugin_changes,
    restore_run,
    task_fingerprint,
)
from .stages import (
    adopt_interface,
    call_stage,
    check_collected,
    check_ids_unused,
    checked_labels,
    collect_sampling,
    evaluate_sampling,
    expect_list_of,
    label_list,
    score_evaluation,
    undeclared_note,
    wrap,
)
from .store import EVAL_BY_COMMAND, RunStore
from .tracking import step_metrics, track
from .types import EvalResult, Interface, ReweightResult, Task, Trajectory, TurnLabel


def _batches(tasks: list[Task], per_step: int, seed: int, epoch: int) -> list[list[Task]]:
    order = list(tasks)
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return [order[i : i + per_step] for i in range(0, len(order), per_step)]


class _Timer:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round(time.perf_counter() - start, 4)


@dataclass
class RunSummary:
    run_id: str
    status: str
    steps_done: int
    run_dir: Path
    evaluations: dict[int, EvalResult] = field(default_factory=dict)
    interface_revision: int = 0


class Progress:
    """What the loop reports while it works; the CLI passes a rich implementation, tests the silent one."""

    def start(self, total_steps: int, first_step: int) -> None: ...
    def stage(self, step: int, stage: str) -> None: ...
    def episodes(self, done: int, total: int) -> None: ...
    def step_done(self, step: int, mean_reward: float, metrics: dict[str, float]) -> None: ...
    def evaluated(self, step: int, result: EvalResult) -> None: ...
    def stop(self) -> None: ...


def _check_writable(run_dir: Path) -> None:
    """Create the run's folder and write a probe file in it; a folder that cannot be written (permissions,
    a read-only or full volume) is one paragraph naming it, raised before anything is stored."""
    import tempfile

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=run_dir, prefix=".write-probe-"):
            pass
    except OSError as exc:
        raise SealError(f"the run folder {run_dir} cannot be written ({exc.strerror or exc}): make its runs "
                        f"folder writable, or choose another one with runs_dir=PATH (a resumed run's folder can "
                        f"be given with --run-dir). Nothing was written to the store.") from None


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (mode 0600, also where the file was there)."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(fd, 0o600)
        out.write(text)


class Runner:
    """One run (new or resumed). ``run()`` drives it to the end and always leaves the store consistent."""

    def __init__(
        self,
        plan: Plan,
        host: PluginHost,
        store: RunStore,
        *,
        recipe: str = "",
        resume_run_id: str | None = None,
        progress: Progress | None = None,
        restart_from: int | None = None,
        takeover: bool = False,
        allow_plugin_changes: bool = False,
        run_dir: Path | None = None,
        accept_changes: bool = False,
    ):
        """``restart_from`` (a resume only): train again from step N, discarding the store's later history (0:
        from the start; N > 0 resumes from the durable checkpoint after step N - 1).

        A resume runs with the plugins the run ran with: plugins loaded in ``host`` that differ from those the
        run recorded are a :class:`~seal_platform.resume.PluginChangesError` listing the differences, raised
        here, before anything is changed, unless ``allow_plugin_changes`` (``--allow-plugin-changes``): then
        the differences are :attr:`plugin_changes`, recorded as an event once the run is claimed.

        ``run_dir`` (a resume only, ``--run-dir``): the run's folder was moved there; once the checks above
        passed, the store is pointed at it (:attr:`relocated`: how many checkpoint paths were rewritten).

        A resume trains on the task data the run started with: when its fingerprints differ (a task file edited
        since), the resume stops once the tasks are loaded, before the history or checkpoints are touched,
        unless ``accept_changes`` (``--accept-changes``; :func:`~seal_platform.resume.check_task_data`)."""
        self.accept_changes = accept_changes
        self.plugin_changes: PluginChanges | None = None
        self.relocated: int | None = None
        row = None
        if resume_run_id is not None:  # the plugins first: the plugins' own check_machine may have changed too
            row = store.get_run(resume_run_id)
            self.plugin_changes = check_resume_plugins(store, row.id, host, allow=allow_plugin_changes)
        elif run_dir is not None:
            raise SealError("run_dir (--run-dir) goes with a resume (resume_run_id).")
        check_machine(plan, host)  # before anything is written or loaded
        self.plan = plan
        self.config = plan.config
        self.host = host
        self.store = store
        self.progress = progress or Progress()
        self.recipe = recipe
        self.resumed = resume_run_id is not None
        if resume_run_id is None:
            stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
            self.run_id = f"{stamp}-{uuid.uuid4().hex[:6]}"
            self.run_dir = Path(self.config.runs_dir).resolve() / self.run_id
        else:
            assert row is not None
            if run_dir is not None:  # the checks passed: the store is pointed at the moved folder
                self.relocated = store.relocate_run(row.id, str(run_dir))
                row = store.get_run(row.id)
            self.run_id = row.id
            self.run_dir = Path(row.run_dir)
            self._seen = (row.status, row.pid, row.host, row.heartbeat_at)  # what the takeover compares and sets
            self._start = plan_start(row, takeover=takeover)  # a refusal is raised by run(), before any write
            if restart_from is not None:  # a step it cannot restart from: refused before anything is touched
                check_restart_point(store, row.id, restart_from)
        if not self.resumed or self.run_dir.is_dir():  # a missing resumed folder is the resume's to report
            _check_writable(self.run_dir)  # before the store holds a row for a run that cannot write its folder
        self.ctx = RunContext(
            config=self.config, run_id=self.run_id, run_dir=self.run_dir, settings=plan.settings, store=store,
            diagnosers=list(plan.diagnoser_names),
        )
        self.ctx.executor = scaleout.build_executor(host, self.ctx, on_progress=self.progress.episodes)
        self.state = CapabilityState()
        self.interface = Interface()
        self.start_step = 0
        self.restart_from = restart_from
        self.takeover = takeover

    # --- the loop --------------------------------------------------------------------------------------

    def run(self) -> RunSummary:
        plugins = [r.to_dict() for r in self.host.records]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.resumed:
            if self._seen[0] == "running" and self._start.action == "refuse":  # two processes would write it
                raise SealError(f"run {self.run_id} is running (pid {self._seen[1]} on {self._seen[2]}); this process "
                                f"wrote nothing and stops. {self._start.reason}")
            if not self.store.claim_run(self.run_id, self._seen, plugins):
                now = self.store.get_run(self.run_id)
                raise SealError(f"run {self.run_id} was taken over by another process (pid {now.pid} on {now.host}, "
                                f"status {now.status}) while this one was starting; this one wrote nothing and stops.")
            if self.plugin_changes is not None:  # the previous plugin list, before the claim replaced its rows
                record_plugin_changes(self.store, self.plugin_changes)
        else:
            # Secrets written out in the recipe are stored and written redacted (${NAME} references as they are).
            shown = redact_config(self.config.model_dump(mode="json"), self.host.settings_models())
            self.store.create_run(
                self.run_id,
                name=self.config.name,
                recipe=scrub(self.recipe),
                config=shown,
                config_hash=self.config.config_hash(),
                seed=self.config.seed,
                run_dir=str(self.run_dir),
                plugins=plugins,
            )
            _write_private(self.run_dir / "config.json", json.dumps(shown, indent=2))
        for record in self.host.records:
            if record.status == "failed":
                self.store.add_event(
                    self.run_id, "plugin_load_failed", f"{record.name}: {record.error}", record.to_dict()
                )
        setup_started = time.perf_counter()  # the set-up time includes the plugins' start_run
        with lifecycle(self.host, self.ctx, resumed=self.resumed, owns_run=True, on_exit=self.progress.stop) as life:
            assert life.heartbeat is not None  # the run owns its store row
            self._heartbeat = life.heartbeat
            # The environment and its tasks before the engine: a split the environment does not have, or no
            # tasks, is refused before the model load that the engine may take minutes for.
            self.progress.stage(self.start_step, "build environment")
            environment = life.environment()
            train_tasks, eval_tasks = self._tasks(environment)
            env_name = self.config.environment
            fingerprints = {f"{env_name} train": task_fingerprint(train_tasks),
                            f"{env_name} eval:{self.config.evaluation.split}": task_fingerprint(eval_tasks)}
            if self.config.evaluation.benchmarks:  # a broken benchmark is refused now, not after training
                self.progress.stage(self.start_step, "build benchmarks")
                fingerprints.update({f"benchmark {key}": task_fingerprint(tasks)
                                     for key, (_owner, _env, tasks) in prepare_benchmarks(self.host, self.ctx).items()})
            # A resume on other task data than the run started with stops here, before its history is touched.
            check_task_data(self.store, self.run_id, fingerprints, resumed=self.resumed, accept=self.accept_changes)
            self.progress.stage(self.start_step, "load model")
            engine = life.engine()
            self._record_stage_time("setup", self.start_step, time.perf_counter() - setup_started)
            return self._train(environment, engine, train_tasks, eval_tasks)

    def _tasks(self, env: Environment) -> tuple[list[Task], list[Task]]:
        """The run's training tasks (``training.max_train_tasks`` of them at most) and evaluation tasks."""
        cfg = self.config
        owner = self.plan.env_owner
        train_tasks = wrap("tasks", owner, lambda: env.tasks("train"), self.host, split="train")
        if cfg.training.max_train_tasks:
            train_tasks = train_tasks[: cfg.training.max_train_tasks]
        eval_tasks = _eval_tasks(env, owner, cfg, self.host)
        if not train_tasks and (cfg.training.steps or 0) != 0:
            raise SealError(f"environment {cfg.environment!r} has no training tasks with these settings.")
        return train_tasks, eval_tasks

    def _train(self, env: Environment, engine: Any, train_tasks: list[Task], eval_tasks: list[Task]) -> RunSummary:
        cfg = self.config
        owner = self.plan.env_owner
        # Like the reference's data loader, an epoch drops its last partial batch (400 tasks / 32 = 12 steps).
        steps_per_epoch = max(1, len(train_tasks) // cfg.training.tasks_per_step)
        total = cfg.training.steps if cfg.training.steps is not None else cfg.training.epochs * steps_per_epoch

        evaluations: dict[int, EvalResult] = {}
        if self.resumed:
            self._restore(engine)
            # The checkpoint after step s is written before the evaluation at s + 1; a kill between them (or
            # any later kill, since resuming drops what came after the checkpoint) must not lose it.
            done = self.start_step
            if done > 0 and eval_tasks and (done == total or self._eval_due(done, total)):
                evaluations[done] = self._evaluate(env, engine, eval_tasks, done)
        if not self.resumed or self.interface is None:
            pristine = wrap("environment", owner, env.pristine_interface, self.host)
            if not isinstance(pristine, Interface):
                raise PluginError(f"plugin {owner!r}: its environment's pristine_interface() returned "
                                  f"{type(pristine).__name__}, not an Interface (seal_platform.types.Interface).")
            self.interface = pristine
            self.store.add_interface(self.run_id, self.interface, None)
            track(self.host, self.ctx, "interface", 0, interface=self.interface)
        if self.start_step == 0 and cfg.evaluation.before_training and eval_tasks:
            evaluations[0] = self._evaluate(env, engine, eval_tasks, 0)
        if self.start_step == 0 and cfg.stages.evolve_interface:
            # With the empty state: an interface whose changes do not wait for diagnoses (the reference's
            # static affordances) is in place for the very first rollouts.
            self._evolve(env, step=0)

        self.progress.start(total, self.start_step)

        def batch_of(step: int) -> list[Task]:
            epoch = step // steps_per_epoch
            return _batches(train_tasks, cfg.training.tasks_per_step, cfg.seed, epoch)[step % steps_per_epoch]

        def prefetch_after(step: int) -> rollouts.Prefetch | None:
            """Step + 1's collect, started in the background (rollout.overlap; see seal_platform.rollouts)."""
            if not rollouts.may_prefetch(cfg, step, total):
                return None
            after, interface = step + 1, self.interface
            return rollouts.Prefetch(after, lambda: rollouts.collect_step(
                lambda tasks: self._collect(env, engine, tasks, after, interface), cfg, batch_of(after),
                train_tasks, after), self.ctx)

        prefetched: rollouts.Prefetch | None = None
        for step in range(self.start_step, total):
            self._heartbeat.check()  # stop here if another process has taken the run over
            collected = prefetched.result() if prefetched is not None else None
            prefetched = self._step(env, engine, step, step // steps_per_epoch, batch_of(step), train_tasks,
                                    collected, prefetch_after)
            done = step + 1
            if cfg.training.checkpoint_every and done % cfg.training.checkpoint_every == 0 and done < total:
                self._checkpoint(step)
            if self._eval_due(done, total) and eval_tasks:
                evaluations[done] = self._evaluate(env, engine, eval_tasks, done)
        if total > self.start_step:
            self._checkpoint(total - 1)
            if eval_tasks:
                evaluations[total] = self._evaluate(env, engine, eval_tasks, total)
        return RunSummary(self.run_id, "completed", total, self.run_dir, evaluations, self.interface.revision)

    def _eval_due(self, done: int, total: int) -> bool:
        """Whether the schedule evaluates after ``done`` steps (the end-of-run evaluation aside)."""
        every = self.config.evaluation.every
        return bool(every) and done % every == 0 and done < total

    def _collect(self, env: Environment, engine: Any, tasks: list[Task], step: int,
                 interface: Interface | None = None) -> list[Trajectory]:
        cfg, owner = self.config, self.plan.env_owner
        trajs = call_stage(
            self.host, "collect", owner, ctx=self.ctx, environment=env, engine=engine, tasks=tasks,
            interface=self.interface if interface is None else interface, group_size=cfg.training.group_size, step=step,
            sampling=collect_sampling(cfg),
        )
        return check_collected(trajs, tasks, cfg.training.group_size, owner)  # count, ids, rewards

    def _step(self, env: Environment, engine: Any, step: int, epoch: int, batch: list[Task],
              train_tasks: list[Task], collected: rollouts.Collected | None,
              prefetch_after: Callable[[int], rollouts.Prefetch | None]) -> rollouts.Prefetch | None:
        """One training step; ``collected``: its rollouts when a prefetch collected them. Returns the
        prefetch of the next step's rollouts it started, if any (finished by the time this returns)."""
        cfg, plan, timer = self.config, self.plan, _Timer()
        self.ctx.take_step_metrics()  # nothing from an earlier, failed attempt at a step
        self.progress.stage(step, "collect")
        if collected is None:
            collected = rollouts.collect_step(lambda tasks: self._collect(env, engine, tasks, step), cfg, batch,
                                              train_tasks, step, lambda stage: self.progress.stage(step, stage))
        timer.timings["collect"] = collected.seconds
        trajs, health, selection = collected.trajectories, collected.health, collected.selection
        # Episodes lost to the infrastructure are stored but never diagnosed nor trained on (see infra.py).
        if health.failed:
            self.ctx.event(
                "infra_failure",
                f"step {step}: {health.summary()}",
                step=step,
                trajectories={t.id: t.infra_failure for t in health.failed},
                masked_groups=health.masked_groups,
            )
            infra.check(health, cfg.rollout.max_infra_failure_frac, step)

        self.progress.stage(step, "diagnose")
        with timer("diagnose"):
            labels = self._diagnose(env, step, health.usable)
            primary = [lab for lab in labels if lab.source == plan.primary_diagnoser]
            self.state.update(step, epoch, health.usable, primary)

        if cfg.stages.evolve_interface:
            self.progress.stage(step, "evolve_interface")
            with timer("evolve_interface"):
                self._evolve(env, step)

        # The next step's rollouts need only the interface and state settled above: they may start now.
        prefetch = prefetch_after(step)
        in_flight = rollouts.RolloutsInFlight(prefetch)
        try:
            # Dynamic sampling trains on its mixed groups only; every rollout is diagnosed and stored all the same.
            trainable = selection.kept if selection is not None else health.trainable
            metrics, label_weights = self._train_on(engine, step, timer, trainable, primary, in_flight)
        finally:
            in_flight.wait()  # whatever optimize did, the next step's rollouts are over before this step ends
        if prefetch is not None:
            timer.timings["rollout_wait"] = round(in_flight.waited_s, 4)
        metrics = {
            **collected.metrics,
            **self.ctx.take_step_metrics(),
            **metrics,
            "infra_masked_frac": health.masked_frac,
        }
        if selection is not None:
            metrics.update(selection.metrics())
        if collected.overlapped:
            metrics["rollouts_overlapped"] = 1.0

        # Ids the store holds already (an earlier step or run) are the plugin's error, found before the write; a
        # step another process recorded first (two processes writing one run) is the store's WriteConflict.
        check_ids_unused(self.store, trajs, "collect", plan.env_owner)
        self.store.record_step(
            self.run_id, step=step, epoch=epoch, trajectories=trajs, labels=labels, label_weights=label_weights,
            state=self.state, interface_revision=self.interface.revision, metrics=metrics, timings=timer.timings,
        )
        track(self.host, self.ctx, "labels", step, labels=labels)
        track(self.host, self.ctx, "step", step, metrics=step_metrics(trajs, metrics, timer.timings),
              label_weights=label_weights)
        self.progress.step_done(step, infra.mean_reward(trajs), metrics)
        return prefetch

    def _diagnose(self, env: Environment, step: int, trajectories: list[Trajectory]) -> list[TurnLabel]:
        """Every enabled diagnoser plugin's labels of the step, each plugin called on its own (through pluggy)
        so that an error names the one that failed, and what each returned checked (:func:`stages.checked_labels`;
        labels no diagnoser declares: one ``labels_undeclared`` event per step).
        A plugin whose ``diagnose`` is a pluggy wrapper gets the others' label lists (innermost wrapper first),
        as a call of all of them would give it, and returns them with its own."""
        names = self.plan.diagnosers
        if not names:
            return []
        kwargs = {"ctx": self.ctx, "environment": env, "trajectories": trajectories, "step": step}
        impls = [impl for impl in self.host.pm.hook.diagnose.get_hookimpls() if impl.plugin_name in names]
        wrappers = [impl for impl in impls if impl.wrapper or impl.hookwrapper]  # innermost first
        registered = self.host.diagnosers()
        ids = {t.id: len(t.turn_verdicts) for t in trajectories}
        results: list[list[TurnLabel]] = []
        undeclared: dict[str, set[str]] = {}  # diagnoser -> labels no diagnoser declares: one event per step
        for impl in reversed([i for i in impls if i not in wrappers]):  # pluggy's order
            plugin = impl.plugin_name
            answer = wrap("diagnose", plugin, lambda: self.host.call_subset("diagnose", [plugin], **kwargs),  # noqa: B023 called now
                          self.host)
            if not answer and trajectories:  # pluggy leaves a None out: the plugin returned nothing
                raise PluginError(f"plugin {plugin!r} returned None from 'diagnose' for the {len(trajectories)} "
                                  f"trajectories of step {step}: a diagnoser returns a list of TurnLabel (an empty "
                                  "list when it has nothing to label); is a `return` missing?")
            if answer:
                results.append(checked_labels(answer[0], plugin, registered, ids, undeclared))
        for impl in wrappers:
            plugin, fed = impl.plugin_name, results
            others = [p for p in self.host.pm.get_plugins() if p is not impl.plugin]
            caller = self.host.pm.subset_hook_caller("diagnose", remove_plugins=others)
            # call_extra puts each extra method before the ones given earlier: reversed, they answer in order.
            answer = wrap("diagnose", plugin, lambda: caller.call_extra([_answering(r) for r in reversed(fed)], kwargs),  # noqa: B023 called now
                          self.host)
            if isinstance(answer, (str, bytes, dict)) or not isinstance(answer, (list, tuple)):
                raise PluginError(f"plugin {plugin!r} (a diagnose wrapper) must return the list of label lists it was "
                                  f"given with its own appended, not {type(answer).__name__}.")
            given = {lab.model_dump_json() for labels in fed for lab in labels}
            results = []
            for labels in answer:
                labels = expect_list_of(label_list(labels, plugin), TurnLabel, "diagnose", plugin)
                own = [lab for lab in labels if lab.model_dump_json() not in given]
                checked_labels(own, plugin, registered, ids, undeclared)
                results.append(labels)
        if undeclared:
            message, data = undeclared_note(step, undeclared)
            self.ctx.event("labels_undeclared", message, **data)
        return [lab for labels in results for lab in labels]

    def _train_on(self, engine: Any, step: int, timer: _Timer, trainable: list[Trajectory], primary: list[TurnLabel],
                  in_flight: rollouts.RolloutsInFlight) -> tuple[dict[str, float], dict[str, float]]:
        """``reweight`` and ``optimize`` on the step's trainable trajectories: (optimizer metrics, label weights)."""
        cfg = self.config
        weights = {t.id: 1.0 for t in trainable}
        label_weights: dict[str, float] = {}
        reweighter = cfg.stages.reweight
        if reweighter:
            self.progress.stage(step, "reweight")
            with timer("reweight"):
                result = call_stage(self.host, "reweight", reweighter, ctx=self.ctx, trajectories=trainable,
                                    labels=primary, state=self.state, step=step)
                if not isinstance(result, ReweightResult):
                    raise PluginError(
                        f"plugin {reweighter!r} must return a ReweightResult from 'reweight', not "
                        f"{type(result).__name__}."
                    )
                missing = [t.id for t in trainable if t.id not in result.trajectory_weights]
                if missing:
                    raise PluginError(f"plugin {reweighter!r} returned no weight for {len(missing)} trajectories.")
                weights, label_weights = result.trajectory_weights, result.label_weights

        metrics: dict[str, float] = {}
        optimizer = cfg.stages.optimize
        if optimizer and trainable:
            self.progress.stage(step, "optimize")
            with timer("optimize"):
                metrics = _optimizer_metrics(
                    call_stage(self.host, "optimize", optimizer, ctx=self.ctx, engine=engine,
                               trajectories=trainable, weights=weights, step=step, rollouts=in_flight),
                    optimizer,
                )
        return metrics, label_weights

    def _evolve(self, env: Environment, step: int) -> None:
        evolver = self.config.stages.evolve_interface
        assert evolver is not None
        new = call_stage(self.host, "evolve_interface", evolver, ctx=self.ctx, environment=env,
                         interface=self.interface, state=self.state, step=step)
        if new is not None:
            self._adopt_interface(new, evolver, step)

    def _adopt_interface(self, new: Any, owner: str, step: int) -> None:
        new = adopt_interface(new, self.interface, step, owner)
        self.store.add_interface(self.run_id, new, self.interface)
        track(self.host, self.ctx, "interface", step, interface=new)
        self.interface = new

    def _record_stage_time(self, stage: str, step: int, seconds: float) -> None:
        """Time a stage the step rows do not hold (set-up, evaluation) as a ``stage_time`` event, for the
        summary and the report."""
        self.store.add_event(self.run_id, "stage_time", f"{stage} at step {step}: {seconds:.1f} s",
                             {"stage": stage, "step": step, "seconds": round(seconds, 4)})

    def _evaluate(self, env: Environment, engine: Any, tasks: list[Task], step: int) -> EvalResult:
        evaluate_started = time.perf_counter()
        self.progress.stage(step, "evaluate")
        result = _call_evaluate(self.host, self.plan.env_owner, self.ctx, env, engine, tasks, step)
        check_ids_unused(self.store, result.trajectories, "evaluate", self.plan.env_owner)  # before the write
        self.store.add_evaluation(self.run_id, step, result, benchmark=self.config.environment)
        if result.n_infra_failures:
            self.ctx.event("infra_failure", f"evaluation at step {step}: {result.n_infra_failures} of {result.n_tasks} "
                           "episode(s) lost to the infrastructure, left out of the pass rates", step=step,
                           phase="eval", trajectories={t.id: t.infra_failure for t in result.trajectories
                                                       if t.infra_failure})
        if self.config.evaluation.training_interface and self.interface is not None and self.interface.revision:
            # The same tasks on the run's current training interface: the train/eval interface gap, measured.
            on_training = _call_evaluate(self.host, self.plan.env_owner, self.ctx, env, engine, tasks, step,
                                         interface=self.interface)
            check_ids_unused(self.store, on_training.trajectories, "evaluate", self.plan.env_owner)
            self.store.add_evaluation(self.run_id, step, on_training,
                                      benchmark=training_interface_set(self.config.environment))
        if self.config.evaluation.benchmarks:
            self.progress.stage(step, "benchmarks")
        evaluate_benchmarks(self.host, self.ctx, engine, step)
        track(self.host, self.ctx, "evaluation", step, evaluation=result)
        self._record_stage_time("evaluate", step, time.perf_counter() - evaluate_started)
        self.progress.evaluated(step, result)
        return result

    # --- checkpoints -----------------------------------------------------------------------------------

    def _checkpoint(self, step: int) -> Path:
        self.progress.stage(step, "checkpoint")
        path = write_checkpoint(self.host, self.ctx, CoreState(step, self.interface.revision, self.state))
        training = self.config.training
        removed = rotate_checkpoints(self.store, self.run_id, training.keep_checkpoints, training.keep_best_by,
                                     self.config.environment)
        if removed:
            self.store.add_event(self.run_id, "checkpoint", f"rotation removed the checkpoint(s) of step(s) "
                                 f"{', '.join(map(str, removed))}", {"removed": removed})
        return path

    def _restore(self, engine: Any) -> None:
        restored = restore_run(self.store, self.host, self.ctx, self.run_dir, self.restart_from)
        self.start_step = restored.start_step
        if restored.state is not None:
            self.state = restored.state
        # None: killed before the pristine interface was stored (_train stores it as for a new run).
        self.interface = restored.interface  # type: ignore[assignment]


def _answering(value: Any) -> Callable[[], Any]:
    return lambda: value


def _optimizer_metrics(result: Any, plugin: str) -> dict[str, float]:
    """What ``optimize`` returned, checked: a flat dict of metric name -> number (None: no metrics), or a
    :class:`PluginError` naming the plugin (nothing of it is stored)."""
    if result is None:
        return {}
    if not isinstance(result, dict):
        raise PluginError(f"plugin {plugin!r} must return a dict of metric name -> float (or None) from 'optimize', "
                          f"not {type(result).__name__}.")
    bad = {k: v for k, v in result.items()
           if not isinstance(k, str) or not isinstance(v, numbers.Real)}
    if bad:
        shown = ", ".join(f"{k!r}: {type(v).__name__}" for k, v in list(bad.items())[:5])
        raise PluginError(f"plugin {plugin!r} returned metrics from 'optimize' that are not a flat dict of "
                          f"name -> float ({shown}).")
    return {k: float(v) for k, v in result.items()}


def _eval_tasks(env: Environment, owner: str, config: RunConfig, host: PluginHost | None = None) -> list[Task]:
    tasks = wrap("tasks", owner, lambda: env.tasks(config.evaluation.split), host, split=config.evaluation.split)
    return tasks[: config.evaluation.max_tasks] if config.evaluation.max_tasks else tasks


def training_interface_set(environment: str) -> str:
    """The name the evaluations on the training interface are stored and shown under."""
    return f"{environment}@training"


def _call_evaluate(
    host: PluginHost, owner: str, ctx: RunContext, env: Environment, engine: Any, tasks: list[Task], step: int,
    interface: Interface | None = None,
) -> EvalResult:
    result = call_stage(host, "evaluate", owner, ctx=ctx, environment=env, engine=engine, tasks=tasks, step=step,
                        sampling=evaluate_sampling(ctx.config), interface=interface)
    return score_evaluation(result, ctx.config.evaluation.split, owner, tasks)  # one per task, finite rewards


def evaluate_checkpoint(
    store: RunStore, host: PluginHost, plan: Plan, run_id: str, step: int | None = None,
    progress: Progress | None = None, training_interface: bool = False,
) -> tuple[int, EvalResult]:
    """Evaluate a run's checkpoint (the last one by default) on ``plan.config.evaluation``'s split and
    record the result with the run, apart from the run's own evaluations (origin ``eval``: ``show`` and the
    report list it on its own, and a resume keeps it while that checkpoint stays). The run itself is left as
    it was. ``progress`` (as for a run) is told
    each phase (model load, checkpoint load, evaluation with its episode counts). ``training_interface``: on
    the training interface the run had at that checkpoint instead of the pristine one (recorded as
    ``<environment>@training``), to measure the train/eval interface gap."""
    progress = progress or Progress()
    config = plan.config
    durable = durable_checkpoints(store, run_id)
    checkpoints = [c for c in durable if step is None or c.step == step]
    if not checkpoints:
        which = f"at step {step}" if step is not None else "at all"
        has = (f"; it has: {', '.join(f'step {c.step} (after {c.step + 1} step(s))' for c in durable)}"
               if durable else "")
        raise SealError(f"run {run_id} has no durable checkpoint {which}{has} (see `seal-platform show {run_id}`).")
    ckpt = checkpoints[-1]
    check_machine(plan, host)
    ctx = RunContext(config=config, run_id=run_id, run_dir=Path(store.get_run(run_id).run_dir),
                     settings=plan.settings, store=store, diagnosers=list(plan.diagnoser_names))
    ctx.executor = scaleout.build_executor(host, ctx, on_progress=progress.episodes)
    done = ckpt.step + 1
    with lifecycle(host, ctx, resumed=True, on_exit=progress.stop) as life:
        progress.stage(done, "build environment")  # a bad split is refused before the model load
        env = life.environment()
        tasks = _eval_tasks(env, plan.env_owner, config, host)
        progress.stage(done, "load model")
        engine = life.engine()
        progress.stage(done, "load checkpoint")
        load_plugin_checkpoints(host, ctx, Path(ckpt.path), ckpt.step)
        interface = None
        if training_interface:
            if not host.takes(plan.env_owner, "evaluate", "interface"):
                raise SealError(f"plugin {plan.env_owner!r} evaluates {config.environment!r} on its pristine "
                                "interface only (its 'evaluate' takes no 'interface'); drop --training-interface.")
            interface = store.interface(run_id, read_core_state(Path(ckpt.path)).interface_revision)
        progress.stage(done, "evaluate")
        result = _call_evaluate(host, plan.env_owner, ctx, env, engine, tasks, done, interface=interface)
        benchmark = training_interface_set(config.environment) if interface is not None else config.environment
        store.add_evaluation(run_id, done, result.model_copy(update={"trajectories": []}),
                             benchmark=benchmark, origin=EVAL_BY_COMMAND)
        store.add_event(run_id, "evaluation", f"checkpoint after step {ckpt.step} evaluated on {result.split}: "
                        f"{result.average:.2f}", {"checkpoint_step": ckpt.step, "split": result.split,
                                                  "n_tasks": result.n_tasks,
                                                  "n_infra_failures": result.n_infra_failures})
        return done, result


def run_plan(
    plan: Plan,
    store: RunStore | None = None,
    *,
    resume_run_id: str | None = None,
    progress: Progress | None = None,
) -> RunSummary:
    """plan -> run: run a plan from :mod:`seal_platform.planning` to its end (or resume ``resume_run_id``),
    recording it in ``store`` (default: the recipe's store)."""
    if plan.host is None:
        raise SealError("this plan has no plugin host; make it with seal_platform.planning.prepare or plan_recipe.")
    store = store if store is not None else RunStore(plan.config.store_url())
    return Runner(plan, plan.host, store, recipe=plan.source, resume_run_id=resume_run_id, progress=progress).run()
