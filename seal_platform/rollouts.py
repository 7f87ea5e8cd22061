"""A step's rollouts: collected when the step starts, or while the step before it trains (``rollout.overlap``).

**The collect phase** (:func:`collect_step`) is ``collect`` on the step's batch and, with dynamic sampling
(:mod:`seal_platform.dynamic_sampling`), the further rounds it draws, triaged for infrastructure failures
(:mod:`seal_platform.infra`). It needs only the batch, the training tasks, the seed, the step and the current
training interface, so it can run before the step before it has finished training.

**Overlapped rollouts** (``rollout.overlap: true``, off by default): once step ``t`` has diagnosed its
rollouts and evolved the interface, the loop starts step ``t + 1``'s collect phase in a background thread
(:class:`Prefetch`) and goes on with ``reweight`` and ``optimize`` of step ``t``; the interface and the
capability state the prefetch sees are exactly those a synchronous step ``t + 1`` would see. Only the policy
differs: step ``t + 1`` is sampled with the weights from before step ``t``'s update (one step off-policy, as
verl's one-step-off pipelining, AReaL's and slime's async modes with a staleness bound of one step).

* **One policy version per trajectory.** ``optimize`` gets the prefetch as ``rollouts``
  (:class:`RolloutsInFlight`) and must call ``rollouts.wait()`` before it changes the weights the engine samples
  with (pushing new weights, sleeping colocated engines, updating a model object the engine shares): the
  engine's weights change only between rollout batches, so every token of every trajectory of a step comes
  from one policy version, the one each message records (``Message.policy_version``). The update itself (the
  expensive part) overlaps the rollouts. An optimizer whose ``optimize`` does not take ``rollouts`` cannot run
  overlapped: the plan refuses ``rollout.overlap`` with it.
* **The staleness bound** is the optimizer's: an overlapped step's trajectories are one step (the optimizer
  updates of one step) older than the policy they train; grpo refuses or importance-corrects them by
  ``grpo.max_staleness`` / ``grpo.stale_samples`` / ``grpo.importance_cap`` and refuses a recipe whose bound
  would drop every overlapped step.
* **Exact resume.** The prefetch never crosses a checkpoint: after a step that writes one, the next step
  collects when it starts, with the weights of the checkpoint, so a run killed and resumed from that
  checkpoint takes the same path as one never killed. The last step prefetches nothing.
* A step's ``collect`` timing is the prefetch's own duration; ``rollout_wait`` (timings) is how long the step
  before it waited for the prefetch to end, and the step's metric ``rollouts_overlapped`` is 1 for a
  prefetched step. Metrics a ``collect`` hook adds with ``ctx.add_step_metrics`` from the prefetch's thread
  go to the step it collects for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import dynamic_sampling, infra
from .config import RunConfig
from .types import Task, Trajectory


@dataclass
class Collected:
    """A step's collect phase: every rollout, their triage and (dynamic sampling) what is trained on."""

    trajectories: list[Trajectory]
    health: infra.Triage
    selection: dynamic_sampling.Selection | None = None
    seconds: float = 0.0
    overlapped: bool = False  # collected by a prefetch while the step before trained
    metrics: dict[str, float] = field(default_factory=dict)  # added by collect hooks from the prefetch's thread


def collect_step(collect: Callable[[list[Task]], list[Trajectory]], config: RunConfig, batch: list[Task],
                 train_tasks: list[Task], step: int, on_stage: Callable[[str], None] = lambda stage: None) -> Collected:
    """Collect step ``step``'s batch with ``collect`` (tasks -> verified trajectories) and, with dynamic
    sampling, the rounds it draws; ``on_stage`` is told each later round."""
    started = time.perf_counter()
    dyn = config.rollout.dynamic_sampling
    selection: dynamic_sampling.Selection | None = None
    wanted = config.training.tasks_per_step
    pool: list[Task] = []
    per_round = dyn.tasks_per_round or wanted
    if dyn.enabled:
        # Round 1 is the scheduled batch, topped up to tasks_per_round with drawn tasks.
        pool = dynamic_sampling.draw_order(train_tasks, batch, config.seed, step)
        top_up = max(0, per_round - len(batch))
        batch, pool = batch + pool[:top_up], pool[top_up:]
    trajs = collect(batch)
    health = infra.triage(trajs)
    if dyn.enabled:
        rounds = 1
        while rounds < dyn.max_rounds and pool and dynamic_sampling.count_mixed(health.trainable) < wanted:
            extra, pool = pool[:per_round], pool[per_round:]
            rounds += 1
            on_stage(f"collect (round {rounds})")
            more = collect(extra)
            trajs = trajs + dynamic_sampling.separate_groups(trajs, more, rounds)
            health = infra.triage(trajs)
        drawn = len(dynamic_sampling.groups_of(trajs))
        selection = dynamic_sampling.select(health.trainable, wanted, rounds, drawn, dyn.keep_surplus)
    return Collected(trajs, health, selection, round(time.perf_counter() - started, 4))


def may_prefetch(config: RunConfig, step: int, total: int) -> bool:
    """Whether step ``step + 1``'s rollouts are collected while step ``step`` trains: ``rollout.overlap`` is on,
    ``step`` is not the last step and writes no checkpoint (a resumed run starts the next step with the
    checkpoint's weights, so an uninterrupted run must too)."""
    done = step + 1
    every = config.training.checkpoint_every
    return config.rollout.overlap and done < total and not (every and done % every == 0)


class Prefetch:
    """Step ``step``'s collect phase running in a thread of its own; :meth:`result` joins it."""

    def __init__(self, step: int, work: Callable[[], Collected], ctx: Any = None):
        self.step = step
        self._work = work
        self._ctx = ctx
        self._result: Collected | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"seal-prefetch-step-{step}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sink: dict[str, float] = {}
        if self._ctx is not None:
            self._ctx.redirect_step_metrics(sink)
        try:
            result = self._work()
            result.overlapped, result.metrics = True, sink
            self._result = result
        except BaseException as exc:  # re-raised in the loop's thread by result()
            self._error = exc
        finally:
            if self._ctx is not None:
                self._ctx.redirect_step_metrics(None)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self) -> None:
        self._thread.join()

    def result(self) -> Collected:
        """The collected rollouts; what the collect raised is raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class RolloutsInFlight:
    """The ``rollouts`` argument of ``optimize``: the next step's collect, when one is running.

    ``wait()`` returns once no rollout of the run is in flight (at once in the synchronous loop, or when
    nothing was prefetched); call it before changing the weights the engine samples with. ``pending`` says
    whether a collect is running now; ``waited_s`` sums the time spent in ``wait()``.
    """

    def __init__(self, prefetch: Prefetch | None = None):
        self._prefetch = prefetch
        self.waited_s = 0.0

    @property
    def pending(self) -> bool:
        return self._prefetch is not None and self._prefetch.running

    def wait(self) -> None:
        if self._prefetch is None:
            return
        started = time.perf_counter()
        self._prefetch.join()  # its errors are the next step's to raise, not the optimizer's
        self.waited_s += time.perf_counter() - started


#: What ``optimize`` gets when nothing is in flight (the synchronous loop; a plugin's own tests).
NOTHING_IN_FLIGHT = RolloutsInFlight()
