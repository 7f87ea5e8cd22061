"""What the grpo plugin keeps for one run (:class:`GRPORun`): the policy, its trainer and the A-Patch state.

The trainer is a single-process :class:`~.trainer.GRPOTrainer` or, with ``grpo.train_workers > 1``, a
:class:`~.distributed.GroupTrainer` (worker processes or Ray actors); each step's update ends with the new
weights pushed into the rollout engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from seal_platform.engine import TrainableEngine
from seal_platform.types import Trajectory
from seal_platform_libs.policy import allocator, memory_phases

from .samples import build_samples, overlong
from .settings import GRPOSettings
from .trainer import GRPOTrainer

if TYPE_CHECKING:
    from .distributed import GroupTrainer


class GRPORun:
    """What the grpo plugin keeps for one run: the policy, its trainer and the A-Patch state.

    The plugin's hooks delegate here; it lives in ``ctx.shared["grpo.run"]``.
    """

    def __init__(self, model: Any, tokenizer: Any, settings: GRPOSettings, apatch: Any, temperature: float = 1.0,
                 train: bool = True, policy: Any = None, seed: int = 0, ray: Any = None):
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings
        self.apatch = apatch
        self.temperature = temperature
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.trainer: GroupTrainer | GRPOTrainer | None
        if train and settings.train_workers > 1:  # FSDP2 workers do the update; `model` is their synced copy
            from .distributed import GroupTrainer

            self.trainer = GroupTrainer(model, settings, policy, temperature=temperature, pad_id=pad or 0, seed=seed,
                                        ray=ray)
        else:
            self.trainer = (
                GRPOTrainer.with_reference(model, settings, temperature=temperature, pad_id=pad or 0) if train else None
            )
        # What holds the trainer's memory, for the hybrid-engine memory sequence (.memory_phases); the
        # sequence's steps are appended to phase_trace when it is a list (tests, debugging).
        self.memory = (memory_phases.LocalTrainerMemory(self.trainer) if isinstance(self.trainer, GRPOTrainer)
                       else self.trainer)
        self.phase_trace: list[str] | None = None
        # What to tell the user when a CPU update runs on glibc's malloc (see .allocator); None: nothing.
        self.allocator_advice = (
            allocator.advice(tcmalloc=allocator.installed_tcmalloc())
            if isinstance(self.trainer, GRPOTrainer) and self.trainer.device.type == "cpu" else None
        )

    def optimize(self, engine: Any, trajectories: Sequence[Trajectory], weights: dict[str, float],
                 screen_stale: bool = False, sleep: Callable[[], None] | None = None,
                 wait_for_rollouts: Callable[[], None] | None = None) -> dict[str, float]:
        """Build samples, update the policy, push the new weights into ``engine``; return metrics.

        ``screen_stale`` applies the staleness rule of the settings (``grpo.max_staleness``,
        ``grpo.stale_samples``, ``grpo.importance_cap``; see :mod:`.staleness`) and
        ``sleep``: engines that share the trainer's GPUs (colocated replicas) are put to sleep with it for the
        update. ``wait_for_rollouts`` (overlapped rollouts, the core's ``rollouts.wait``): returns once the
        next step's rollouts, sampled from the engine's current weights, are over; it is called before the
        weights the engine samples with change: before the push, or before the update itself when the engine
        generates with the trainer's own model object or must sleep for it."""
        from . import staleness

        if self.trainer is None:
            raise RuntimeError("the grpo plugin was started without a trainer (stages.optimize is not grpo)")
        screened = None
        settings = self.settings
        if screen_stale:
            screened = staleness.screen(
                trajectories, self.trainer.updates, settings.max_staleness, settings.stale_samples
            )
            trajectories = screened.kept
        samples = build_samples(self.tokenizer, trajectories, weights, self.settings)
        if screened is not None and screened.corrected:
            if self.temperature != 1.0:
                raise ValueError("settings.grpo.stale_samples = importance_correct needs sampling at temperature 1 "
                                 "(engines report log-probs at temperature 1); use refuse")
            for sample in samples:
                if sample.id in screened.corrected:
                    sample.importance_cap = settings.importance_cap
        wait = wait_for_rollouts or (lambda: None)
        if sleep is not None or (isinstance(engine, TrainableEngine) and engine.shares_model(self.model)):
            wait()  # the update itself changes (or takes the memory of) what the engine samples with
        if sleep is not None:  # colocated engines give the GPU memory to the update
            memory_phases.to_trainer_mode(engine, self.memory, sleep=sleep, trace=self.phase_trace)
        metrics = self.trainer.step(samples)
        memory_phases.empty_cache()  # this process's share of the update (the workers empty their own)
        if screened is not None:
            metrics.update(screened.metrics)
        metrics["truncated_sequences"] = float(sum(x.truncated for x in samples))
        if settings.overlong_filter:
            metrics["overlong_masked"] = float(sum(overlong(t) for t in trajectories))
        advantages = [x.advantage for x in samples]
        if advantages:
            metrics["advantage_abs_mean"] = sum(abs(a) for a in advantages) / len(advantages)
            metrics["zero_advantage_frac"] = sum(1 for a in advantages if a == 0.0) / len(advantages)
        started = time.perf_counter()
        wait()  # the engine's weights change only between rollout batches: one policy version per trajectory

        trainer = self.trainer  # not None (checked above), for the closure

        def push() -> None:  # from the trainer ranks' GPUs where they can (device_push), else the driver's copy
            if not trainer.push_to_engine(engine, trainer.updates):
                staleness.push_weights(engine, self.model, trainer.updates)

        # Unchanged weights (no update this step) need no push, unless the engines slept for the update: the
        # push is what wakes them (a vLLM engine asleep at level 2 has no weights until it).
        if sleep is not None:  # the memory goes back to the engines; the push is what wakes a vLLM engine
            memory_phases.to_rollout_mode(engine, self.memory, push, offload=settings.trainer_offload,
                                          trace=self.phase_trace)
        elif metrics.get("updates", 1.0) > 0:
            push()
        metrics["weight_push_s"] = time.perf_counter() - started
        return metrics
